"""The newest profiler trace under a folder, parsed: the planes (host threads, devices) that
`trace.read_window` and `stage_settings.read_stage_settings` each read their events from."""

from __future__ import annotations

import glob
import os
from typing import Any

from feedgpu.tf_private import xspace


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
