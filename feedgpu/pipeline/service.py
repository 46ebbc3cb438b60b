"""tf.data service servers: a dispatcher and workers that run input pipelines for trainers.

When one host's cores cannot keep a model fed, the pipeline's parsing, decoding and augmentation
move to CPU workers: `PipelineSpec(service="grpc://dispatcher:port")` sends the pipeline there
and batches come back (the service costs per element, so whole batches travel, never single
examples; benchmarks/RESULTS.md). The service has no authentication, and TensorFlow binds its
servers to every interface (it offers no bind address): run it on a private network or behind
a firewall.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from feedgpu.errors import UsageError
from feedgpu.tf_private import stop_server, worker_address

logger = logging.getLogger(__name__)


@dataclass
class ServiceServer:
    """A running dispatcher or worker.

    Attributes:
        kind: "dispatcher" or "worker".
        address: what clients (trainers, workers) use: grpc://host:port for a dispatcher,
            host:port for a worker.
        server: the TensorFlow server object.
    """

    kind: str
    address: str
    server: Any

    def stop(self) -> None:
        """Stop serving."""
        stop_server(self.server)


def hostport(address: str) -> str:
    """host:port of an address given with or without its scheme (grpc://host:port)."""
    return address.split("://", 1)[1] if "://" in address else address


def start_dispatcher(
    port: int = 0, *, work_dir: str | None = None, host: str = "localhost"
) -> ServiceServer:
    """Start a dispatcher; with work_dir it journals its state there and survives restarts.

    Args:
        port: 0 picks a free port.
        host: the name clients reach this machine by (the address printed).
    """
    import tensorflow as tf

    if port < 0 or port > 65535:
        raise UsageError(f"--port {port}: must be 0..65535")
    config = tf.data.experimental.service.DispatcherConfig(
        port=port, work_dir=work_dir, fault_tolerant_mode=work_dir is not None
    )
    server = tf.data.experimental.service.DispatchServer(config)
    bound = int(server.target.rsplit(":", 1)[1])
    return ServiceServer("dispatcher", f"grpc://{host}:{bound}", server)


def start_worker(dispatcher: str, port: int = 0, *, host: str = "localhost") -> ServiceServer:
    """Start a worker that registers with the dispatcher and runs pipelines it is given.

    The worker reads the dataset's files itself: DATA must be at the same path on every worker
    (a shared file system or gs://).
    """
    import tensorflow as tf

    if port < 0 or port > 65535:
        raise UsageError(f"--port {port}: must be 0..65535")
    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=hostport(dispatcher),
        port=port,
        worker_address=f"{host}:%port%",
    )
    server = tf.data.experimental.service.WorkerServer(config)
    return ServiceServer("worker", worker_address(server), server)


def serve_until_signalled(server: ServiceServer, on_ready: Callable[[], None]) -> None:
    """Block until SIGTERM or SIGINT, then stop the server cleanly.

    on_ready runs once the handlers are in place (e.g. to print the address), so a signal sent
    as soon as the address is seen still stops the server cleanly.
    """
    done = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        done.set()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    on_ready()
    try:
        while not done.wait(0.5):
            pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        server.stop()
