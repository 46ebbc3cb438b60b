"""Profiler traces: one trace's life (a folder of its own, start, stop, read,
removed unless kept), and the newest trace under a folder parsed into the planes (host
threads, devices) that `trace.read_window` and `stage_settings.read_stage_settings` each read
their events from."""

from __future__ import annotations

import glob
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from feedgpu.tf_private import xspace

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class ProfilerSession:
    """One profiler trace: its folder, the first training step it covers, its epoch, or
    that it was skipped (another profiler was running: TensorFlow runs one at a time)."""

    folder: str
    first_step: int = 0
    epoch: int | None = None
    skipped: bool = False

    @classmethod
    def begin(
        cls,
        trace_dir: str | None,
        what: str,
        first_step: int = 0,
        epoch: int | None = None,
        tag: str = "trace",
    ) -> ProfilerSession:
        """Start profiling into a new folder (under trace_dir, else a temporary one named
        feedgpu-TAG-*); what: who asks, for the warning when it must be skipped."""
        import tensorflow as tf

        # A folder a trace: the profiler names its runs by the second, and traces a second
        # apart would overwrite each other.
        if trace_dir:
            os.makedirs(trace_dir, exist_ok=True)
        prefix = f"step-{first_step}-" if trace_dir else f"feedgpu-{tag}-"
        folder = tempfile.mkdtemp(prefix=prefix, dir=trace_dir)
        try:
            tf.profiler.experimental.start(folder)
        except tf.errors.AlreadyExistsError:
            logger.warning(
                "%s: another profiler is running (TensorBoard's profile_batch or bench-input "
                "--profile?): skipped",
                what,
            )
            shutil.rmtree(folder, ignore_errors=True)
            return cls(folder, first_step, epoch, skipped=True)
        return cls(folder, first_step, epoch)

    def stop(self) -> None:
        import tensorflow as tf

        tf.profiler.experimental.stop()

    def read(self, reader: Callable[[str], T], keep: bool) -> T:
        """reader(folder), then the folder removed unless kept (its path logged)."""
        try:
            return reader(self.folder)
        finally:
            if keep:
                logger.info("profiler trace kept in %s", self.folder)
            else:
                shutil.rmtree(self.folder, ignore_errors=True)


def newest_planes(logdir: str) -> list[Any]:
    """Every plane of the newest trace run under logdir (none when there is no trace)."""
    runs = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*")))
    planes: list[Any] = []
    for path in glob.glob(os.path.join(runs[-1], "*.xplane.pb")) if runs else []:
        space = xspace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        planes.extend(space.planes)
    return planes
