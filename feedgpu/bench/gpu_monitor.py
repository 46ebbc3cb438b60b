"""GPU utilisation sampled through NVML while a phase runs (optional: the gpu extra, nvidia-ml-py).

NVML's utilisation is the share of time a kernel was running: the number `nvidia-smi` shows and
the one users quote when they say their GPU idles. Without a GPU, the package or the driver, the
monitor reports why instead of a number.
"""

from __future__ import annotations

import logging
import os
import threading
from types import TracebackType
from typing import Any

logger = logging.getLogger(__name__)


class GpuMonitor:
    """Samples every GPU's utilisation on a background thread between enter and exit.

    Attributes:
        interval_s: seconds between samples.
        samples: per sample, the mean utilisation (0..1) over the GPUs.
        unavailable: why nothing was sampled (None when sampling worked).
    """

    def __init__(self, interval_s: float = 0.1, enabled: bool = True) -> None:
        self.interval_s = interval_s
        self.samples: list[float] = []
        self.unavailable: str | None = None if enabled else "no GPU"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._handles: list[Any] = []

    def __enter__(self) -> GpuMonitor:
        if self.unavailable:
            return self
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and not visible.strip():
            self.unavailable = "CUDA_VISIBLE_DEVICES hides every GPU"
            return self
        try:
            import pynvml
        except ImportError:
            self.unavailable = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
            return self
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._handles = _visible(pynvml, handles, visible)
        except pynvml.NVMLError as e:
            self.unavailable = f"NVML is not usable here ({e})"
            return self
        if not self._handles:
            self.unavailable = "NVML sees no GPU"
            pynvml.nvmlShutdown()
            return self
        self._nvml = pynvml
        self._thread = threading.Thread(target=self._run, name="feedgpu-nvml", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                rates = [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]
            except self._nvml.NVMLError as e:
                logger.warning("stopped sampling GPU utilisation: %s", e)
                return
            self.samples.append(sum(rates) / len(rates) / 100)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._nvml.nvmlShutdown()

    @property
    def utilization(self) -> float | None:
        """Mean utilisation over the samples (0..1), or None when nothing was sampled."""
        return sum(self.samples) / len(self.samples) if self.samples else None


def _visible(nvml: Any, handles: list[Any], visible: str | None) -> list[Any]:
    """The GPUs CUDA (and so TensorFlow) uses: NVML lists every GPU whatever
    CUDA_VISIBLE_DEVICES says, which names them by index or by UUID."""
    if visible is None:
        return handles
    chosen = []
    for name in (v.strip() for v in visible.split(",")):
        if name.isdigit():
            if int(name) >= len(handles):
                break  # CUDA stops at the first invalid entry
            chosen.append(handles[int(name)])
            continue
        match = [h for h in handles if str(nvml.nvmlDeviceGetUUID(h)).startswith(name)]
        if not match:
            break
        chosen.append(match[0])
    return chosen
