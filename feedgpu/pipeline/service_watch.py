"""A watch on a tf.data service from the trainer's side: a stall names the worker that stopped.

TensorFlow's service (2.21) never takes a dead worker's task out of its job: an epoch that must
end, or a distributed_epoch whose splits the worker held, waits until a worker comes back at
the same address, and the trainer's next batch blocks inside TensorFlow with nothing printed.
A service pipeline counts the batches it delivers (`build_pipeline`); when none came for
`stall_s` and a worker the dispatcher listed (or the dispatcher) no longer answers, the watch
says which one and what to do, and again while the stall lasts. A restarted worker ends the
stall: the batches flow again. Training loops that can be restarted arm the watch
(`ServiceGuard` for Keras, `arm` for a loop of one's own): past `timeout_s` of such a stall
the process ends with exit code 75 (EX_TEMPFAIL) and one line, for a supervisor to restart
it, rather than wait forever.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

STALL_S = 60.0  # no batch for this long, and a silent worker: said
TIMEOUT_S = 600.0  # and for this long, armed: the process ends
EXIT_TEMPFAIL = 75
_GET_WORKERS = "/tensorflow.data.DispatcherService/GetWorkers"


def _hostport(address: str) -> str:
    return address.split("://", 1)[1] if "://" in address else address


def service_workers(dispatcher: str, timeout_s: float = 5.0) -> list[str]:
    """The workers registered with a dispatcher (grpc://host:port), by its GetWorkers call.

    Raises:
        OSError: the dispatcher did not answer.
    """
    import grpc

    with grpc.insecure_channel(_hostport(dispatcher)) as channel:
        call = channel.unary_unary(_GET_WORKERS)  # bytes in and out: an empty request
        try:
            raw = call(b"", timeout=timeout_s)
        except grpc.RpcError as e:
            raise OSError(f"dispatcher {dispatcher}: {e.code().name}") from None
    # GetWorkersResponse: field 1 repeated WorkerInfo, whose field 1 is the address.
    return [_field_one(info).decode() for info in _fields_one(raw)]


def _fields_one(message: bytes) -> list[bytes]:
    """The bytes of every length-delimited field 1 of a protobuf message (others skipped)."""
    found, at = [], 0
    while at < len(message):
        key, at = _varint(message, at)
        kind = key & 7
        if kind == 2:
            size, at = _varint(message, at)
            if key >> 3 == 1:
                found.append(message[at : at + size])
            at += size
        elif kind == 0:
            at = _varint(message, at)[1]
        elif kind in (1, 5):
            at += 8 if kind == 1 else 4
        else:
            raise OSError("the dispatcher's answer is not a GetWorkersResponse")
    return found


def _field_one(message: bytes) -> bytes:
    fields = _fields_one(message)
    return fields[0] if fields else b""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise OSError("the dispatcher's answer is cut short")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return value, at


def answers(address: str, timeout_s: float = 2.0) -> bool:
    """Whether host:port accepts a connection (a killed worker's port refuses at once)."""
    host, _, port = _hostport(address).rpartition(":")
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
        stall_s: no batch for this long, with a silent worker, is said (and again each stall_s).
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
        self.known: set[str] = set()  # every worker the dispatcher has listed
        self.armed = 0  # training loops that may be ended (`arm`)
        self.batches = 0
        self._last = 0.0  # when the last batch came (monotonic)
        self._listed = 0.0  # when the workers were last listed
        self._said = 0.0  # when the stall was last said
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """A batch came from the service (called by the pipeline, on tf.data's threads)."""
        with self._lock:
            self.batches += 1
            self._last = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="feedgpu-service-watch", daemon=True
                )
                self._thread.start()

    def arm(self, on: bool = True) -> None:
        """A training loop that a supervisor restarts begins (on) or ends (off)."""
        with self._lock:
            self.armed += 1 if on else -1
            self._last = max(self._last, time.monotonic())  # a loop's start is no stall

    def _run(self) -> None:
        period = max(0.2, min(10.0, self.stall_s / 3))
        while True:
            time.sleep(period)
            self.check()

    def check(self) -> str | None:
        """What is said of the service now (None: nothing): the stall and who is silent."""
        now = time.monotonic()
        if now - self._listed >= 30 or not self.known:
            self._list()
            self._listed = now
        idle = now - self._last
        if idle < self.stall_s:
            self._said = 0.0
            return None
        silent = sorted(w for w in self.known if not answers(w))
        if not answers(self.dispatcher):
            silent.insert(0, f"the dispatcher {self.dispatcher}")
        if not silent:
            return None  # a slow step or a loop that stopped reading: not the service
        message = self._message(idle, silent)
        if self.armed and idle >= self.timeout_s:
            self.on_timeout(f"{message}; gave up after {self.timeout_s:.0f} s")
            return message
        if now - self._said >= self.stall_s:
            self._said = now
            logger.warning("%s", message)
        return message

    def _list(self) -> None:
        with contextlib.suppress(OSError):  # an unreachable dispatcher: said with a stall
            self.known.update(service_workers(self.dispatcher))

    def _message(self, idle: float, silent: list[str]) -> str:
        workers = [w for w in silent if not w.startswith("the dispatcher")]
        how = ""
        if workers:
            port = workers[0].rpartition(":")[2]
            how = (
                f"; restart it at the same address (feedgpu serve worker --dispatcher "
                f"{self.dispatcher} --port {port}) and training carries on where it waits"
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
    """The process's one watch of a dispatcher's service."""
    with _watches_lock:
        if dispatcher not in _watches:
            _watches[dispatcher] = ServiceWatch(dispatcher)
        return _watches[dispatcher]


def watches() -> list[ServiceWatch]:
    with _watches_lock:
        return list(_watches.values())
