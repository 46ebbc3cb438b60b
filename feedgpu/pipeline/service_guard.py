"""`ServiceGuard`: a `model.fit` that a dead tf.data service worker stalls ends, and says why.

Imports Keras; reached only through lazy imports (`feedgpu.ServiceGuard`).
"""

from __future__ import annotations

from typing import Any

import keras

from feedgpu.pipeline.service_watch import STALL_S, TIMEOUT_S, watch_for


class ServiceGuard(keras.callbacks.Callback):
    """Arms the watch of a service pipeline's batches (`service_watch`) while `fit` trains.

    After stall_s without a batch while a worker (or the dispatcher) is not answering, it
    says which one and how to restart it (a worker restarted at the same address ends the
    stall); after timeout_s the process ends with exit code 75 and one line, for a supervisor
    to restart it instead of waiting forever. Evaluation inside `fit` pauses it.

    Usage::

        model.fit(feedgpu.build_pipeline(spec), callbacks=[feedgpu.ServiceGuard(spec.service)])
    """

    def __init__(
        self, service: str, timeout_s: float = TIMEOUT_S, stall_s: float = STALL_S
    ) -> None:
        super().__init__()
        self.watch = watch_for(service)
        self.watch.timeout_s, self.watch.stall_s = timeout_s, stall_s
        self._training = self._armed = False

    def _arm(self, on: bool) -> None:
        if on != self._armed:
            self._armed = on
            self.watch.arm(on)

    def on_train_begin(self, logs: Any = None) -> None:
        self._training = True
        self._arm(True)

    def on_train_end(self, logs: Any = None) -> None:
        self._training = False
        self._arm(False)

    def on_test_begin(self, logs: Any = None) -> None:
        self._arm(False)

    def on_test_end(self, logs: Any = None) -> None:
        self._arm(self._training)  # evaluate() alone never arms it
