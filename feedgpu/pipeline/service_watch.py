"""A watch on a tf.data service from the trainer's side: a stall names the worker that stopped.

TensorFlow's service (2.21) never takes a dead worker's task out of its job: an epoch that must
end, or a distributed_epoch whose splits the worker held, waits until a worker comes back at
the same address, and the trainer's next batch blocks inside TensorFlow with nothing printed.
A service pipeline counts the batches it delivers (`build_pipeline`); when none came for
`stall_s` after its first (or while a loop waits) and a worker the dispatcher listed (or the
dispatcher) no longer answers, the watch says which one and how to restart it, then at
growing intervals. A restarted worker ends the stall. Loops that a supervisor restarts let the
watch end them (`ServiceGuard` for Keras, whose steps it times; `arm` for a loop of one's own):
past `timeout_s` of such a stall while a step waits, the process ends with exit code 75
(EX_TEMPFAIL) and one line, rather than wait forever.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from feedgpu.format.records import message_fields
from feedgpu.pipeline.service import hostport

logger = logging.getLogger(__name__)

STALL_S = 60.0  # no batch for this long, and a silent worker: said
TIMEOUT_S = 600.0  # and for this long, armed: the process ends
EXIT_TEMPFAIL = 75
_GET_WORKERS = "/tensorflow.data.DispatcherService/GetWorkers"


def service_workers(dispatcher: str, timeout_s: float = 5.0) -> list[str]:
    """The workers registered with a dispatcher (grpc://host:port), by its GetWorkers call.

    Raises:
        OSError: the dispatcher did not answer.
    """
    import grpc

    with grpc.insecure_channel(hostport(dispatcher)) as channel:
        call = channel.unary_unary(_GET_WORKERS)  # bytes in and out: an empty request
        try:
            raw = call(b"", timeout=timeout_s)
            # GetWorkersResponse: field 1, repeated WorkerInfo, whose field 1 is the address.
            infos = [v for n, _, v in message_fields(raw) if n == 1 and isinstance(v, bytes)]
            return [
                v.decode()
                for info in infos
                for n, _, v in message_fields(info)
                if n == 1 and isinstance(v, bytes)
            ]
        except grpc.RpcError as e:
            raise OSError(f"dispatcher {dispatcher}: {e.code().name}") from None
        except (ValueError, TypeError, UnicodeDecodeError):
            raise OSError(f"dispatcher {dispatcher}: not a GetWorkers answer") from None


def answers(address: str, timeout_s: float = 2.0) -> bool:
    """Whether host:port accepts a connection (a killed worker's port refuses at once)."""
    host, _, port = hostport(address).rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


class ServiceWatch:
    """Batches delivered from one dispatcher's service, and a thread that says when they
    stopped because a worker (or the dispatcher) stopped answering.

    Args:
        dispatcher: the service's address (grpc://host:port).
        stall_s: no batch for this long, with a silent worker, is said (then at growing
            intervals: twice as long each time).
        timeout_s: an armed watch ends the process after this long (exit code 75).
        on_timeout: what ending is (tests give their own); the default exits at once.
    """

    def __init__(
        self,
        dispatcher: str,
        stall_s: float = STALL_S,
        timeout_s: float = TIMEOUT_S,
        on_timeout: Callable[[str], None] | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.stall_s, self.timeout_s = stall_s, timeout_s
        self.on_timeout = on_timeout or _exit
        self.known: set[str] = set()  # the workers the dispatcher lists (and listed, if silent)
        self.armed = 0  # loops of one's own that may be ended (`arm`)
        self.batches = 0
        self.live = 0  # pipelines of this service not yet collected (`track`)
        self._step: tuple[int, float] | None = None  # a Keras step waiting: thread, since
        self._last = time.monotonic()  # the last batch, or the watch's start
        self._listed = 0.0  # when the workers were last listed
        self._next_say = 0.0  # when a stall may be said again
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """The watching thread started, once (a pipeline is built, a loop armed)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="feedgpu-service-watch", daemon=True
                )
                self._thread.start()

    def track(self, dataset: Any) -> None:
        """A pipeline reading this service, counted while it exists: once every one is gone
        (training over), a silent service is nobody's stall."""
        with self._lock:
            self.live += 1
        weakref.finalize(dataset, self._dropped)

    def _dropped(self) -> None:
        with self._lock:
            self.live -= 1

    def beat(self) -> None:
        """A batch came from the service (called by the pipeline, on tf.data's threads)."""
        with self._lock:
            self.batches += 1
            self._last = time.monotonic()

    def arm(self, on: bool = True) -> None:
        """A loop of one's own that a supervisor restarts begins (on) or ends (off)."""
        with self._lock:
            self.armed += 1 if on else -1
            self._last = max(self._last, time.monotonic())  # a loop's start is no stall
        self.start()

    def step(self, begun: bool) -> None:
        """A Keras training step begins (it waits for its batch until it ends) or ends
        (`ServiceGuard`): time outside steps (callbacks, checkpoints, evaluation) never counts
        as a stall."""
        now = time.monotonic()
        with self._lock:
            self._step = (threading.get_ident(), now) if begun else None
            self._last = max(self._last, now) if begun else self._last
        self.start()

    def _run(self) -> None:
        period = max(0.2, min(10.0, self.stall_s / 3))
        while True:
            time.sleep(period)
            try:
                self.check()
            except Exception as e:  # the watch never dies, never stops training
                logger.debug("service watch: %s", e)

    def _waiting(self) -> bool:
        """Whether a loop that may be ended waits: armed, or a Keras step still inside `fit`
        (a `fit` that raised leaves its step begun: its thread is no longer in `fit`)."""
        if self.armed > 0:
            return True
        step = self._step
        if step is None:
            return False
        frame = sys._current_frames().get(step[0])
        while frame is not None:
            if frame.f_code.co_name == "fit" and "keras" in frame.f_code.co_filename:
                return True
            frame = frame.f_back
        return False

    def check(self) -> str | None:
        """What is said of the service now (None: nothing): the stall and who is silent."""
        now = time.monotonic()
        if now - self._listed >= 30 or not self.known:
            self._list()
            self._listed = now
        idle = now - self._last
        waiting = self._waiting()
        if idle < self.stall_s or not (waiting or (self.batches and self.live)):
            self._next_say = 0.0
            return None  # no stall, a pipeline never read, or none left to read
        silent = sorted(w for w in self.known if not answers(w))
        if not answers(self.dispatcher):
            silent.insert(0, f"the dispatcher {self.dispatcher}")
        if not silent:
            return None  # a slow step or a loop that stopped reading: not the service
        message = self._message(idle, silent)
        if waiting and idle >= self.timeout_s:
            self.on_timeout(f"{message}; gave up after {self.timeout_s:.0f} s")
            return message
        if now >= self._next_say:
            self._next_say = now + max(self.stall_s, 2 * (idle - self.stall_s))
            logger.warning("%s", message)
        return message

    def _list(self) -> None:
        with contextlib.suppress(OSError):  # an unreachable dispatcher: said with a stall
            listed = set(service_workers(self.dispatcher))
            # A worker no longer listed is kept while it is silent: its job may wait for it.
            self.known = listed | {w for w in self.known - listed if not answers(w)}

    def _message(self, idle: float, silent: list[str]) -> str:
        workers = [w for w in silent if not w.startswith("the dispatcher")]
        how = ""
        if workers:
            host, _, port = hostport(workers[0]).rpartition(":")
            how = (
                f"; restart it at the same address (on {host}: feedgpu serve worker "
                f"--dispatcher {self.dispatcher} --host {host} --port {port}) and the batches "
                "come again"
            )
        return (
            f"no batch from the tf.data service for {idle:.0f} s: "
            f"{', '.join(silent)} stopped answering{how}"
        )


def _exit(message: str) -> None:
    """One line, then the process ends with EX_TEMPFAIL (the blocked batch cannot be
    interrupted: it waits inside TensorFlow)."""
    sys.stderr.write(f"feedgpu: error: {message}\n")
    sys.stderr.flush()
    logging.shutdown()
    os._exit(EXIT_TEMPFAIL)


_watches: dict[str, ServiceWatch] = {}
_watches_lock = threading.Lock()


def watch_for(dispatcher: str) -> ServiceWatch:
    """The process's one watch of a dispatcher's service, its thread started."""
    with _watches_lock:
        if dispatcher not in _watches:
            _watches[dispatcher] = ServiceWatch(dispatcher)
        watch = _watches[dispatcher]
    watch.start()
    return watch
