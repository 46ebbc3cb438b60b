"""`ServiceGuard`: a `model.fit` that a dead tf.data service worker stalls ends, and says why.

Imports Keras; reached only through lazy imports (`feedgpu.ServiceGuard`).
"""

from __future__ import annotations

from typing import Any

import keras

from feedgpu.pipeline.service_watch import STALL_S, TIMEOUT_S, watch_for


class ServiceGuard(keras.callbacks.Callback):
    """Lets the watch of a service pipeline's batches (`service_watch`) end a `fit` whose step
    waits on a stalled service.

    After stall_s without a batch while a worker (or the dispatcher) is not answering, it is
    said, with how to restart it (a worker restarted at the same address ends the stall);
    after timeout_s of a step still waiting, the process ends with exit code 75 and one line,
    for a supervisor to restart it instead of waiting forever. Only time inside a training step
    counts (callbacks, checkpoints and evaluation between steps never do), and only while that
    step's `fit` runs.

    Usage::

        model.fit(feedgpu.build_pipeline(spec), callbacks=[feedgpu.ServiceGuard(spec.service)])
    """

    def __init__(
        self, service: str, timeout_s: float = TIMEOUT_S, stall_s: float = STALL_S
    ) -> None:
        super().__init__()
        self.watch = watch_for(service)
        self.watch.timeout_s, self.watch.stall_s = timeout_s, stall_s

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.watch.step(True)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.watch.step(False)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.watch.step(False)  # the step begun when the epoch's data ran out never ended

    def on_test_begin(self, logs: Any = None) -> None:
        self.watch.step(False)  # validation: after the epoch's last step

    def on_train_end(self, logs: Any = None) -> None:
        self.watch.step(False)
