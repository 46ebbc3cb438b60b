"""The pipeline as TensorFlow ran it: each stage's parallelism and buffer sizes, read from a
profiler trace of a fresh iterator (tf.data's `Iterator::` trace events carry them), for the
report's "pipeline as built" table. Taken after the timed phases, so it never changes what is
measured; a stage that did not run while traced (upstream of a filled cache) is not there.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from feedgpu.bench.xplane import ProfilerSession, newest_planes

# The settings a stage's trace events carry (TF 2.21), in the order a table shows them.
SETTINGS = (
    "parallelism",
    "cycle_length",
    "buffer_limit",
    "buffer_size",
    "batch_size",
    "buffer_output_elements",
    "prefetch_input_elements",
)
_INDEX = re.compile(r"\[\d+\]")  # Iterator::...::ForeverRepeat[7]::...: the repetition's number


@dataclass(frozen=True)
class StageSetting:
    """One stage of the pipeline as its trace events describe it.

    Attributes:
        path: its place in the iterator tree, from the root (repetition numbers left out).
        stage: the stage's kind as TensorFlow names it (ParallelMapV2, Prefetch, MapAndBatch).
        settings: each setting's last traced value.
        ranges: for a setting that changed while traced (the autotuner), its (min, max).
        autotune: whether the autotuner owned the stage's parameters.
    """

    path: str
    stage: str
    settings: dict[str, int]
    ranges: dict[str, tuple[int, int]]
    autotune: bool | None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "stage": self.stage,
            "settings": dict(self.settings),
            "ranges": {k: list(v) for k, v in self.ranges.items()},
            "autotune": self.autotune,
        }


@dataclass(frozen=True)
class StageSettings:
    """Every traced stage that has a setting, root first, and where the numbers came from."""

    source: str
    stages: tuple[StageSetting, ...]

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "stages": [s.to_json() for s in self.stages]}


def trace_stage_settings(
    dataset: Any, seconds: float = 0.5, min_batches: int = 8, logdir: str | None = None
) -> StageSettings | None:
    """Trace a fresh iterator of `dataset` from its start, for `seconds` and at least
    `min_batches` batches, and read each stage's settings from the trace (kept under `logdir`
    when given, for a second look in TensorBoard; else removed once read). None when another
    profiler is running."""
    import tensorflow as tf

    profiled = ProfilerSession.begin(logdir, "the pipeline's stage trace", tag="stages")
    if profiled.skipped:
        return None
    iterator = iter(dataset)
    count = 0
    try:
        end = time.perf_counter() + seconds
        while count < min_batches or time.perf_counter() < end:
            try:
                next(iterator)
            except StopIteration:
                break
            count += 1
    finally:
        profiled.stop()
    stages = profiled.read(read_stage_settings, keep=logdir is not None)
    source = (
        f"TensorFlow {tf.__version__}'s profiler trace of a fresh iterator's first {count} "
        "batches (tf.data Iterator:: events)"
    )
    return StageSettings(source, stages)


def read_stage_settings(logdir: str) -> tuple[StageSetting, ...]:
    """Each stage with a setting in the newest trace under logdir, in the order first seen."""
    seen: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for plane in newest_planes(logdir):
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if not name.startswith("Iterator::"):
                    continue
                stats = {
                    stat_names.get(s.metadata_id, ""): _stat_value(s, stat_names)
                    for s in event.stats
                }
                start = line.timestamp_ns * 1000 + event.offset_ps
                seen.setdefault(_INDEX.sub("", name), []).append((start, stats))
    out = []
    for path, events in seen.items():
        events.sort(key=lambda e: e[0])
        values = {k: [int(s[k]) for _, s in events if _is_int(s.get(k))] for k in SETTINGS}
        values = {k: v for k, v in values.items() if v}
        if not values:
            continue
        autotune = events[-1][1].get("autotune")
        out.append(
            StageSetting(
                path=path.removeprefix("Iterator::"),
                stage=path.rsplit("::", 1)[-1],
                settings={k: v[-1] for k, v in values.items()},
                ranges={k: (min(v), max(v)) for k, v in values.items() if min(v) != max(v)},
                autotune=None if autotune is None else str(autotune) == "true",
            )
        )
    return tuple(out)


def _is_int(value: Any) -> bool:
    """A number (a setting TF could not tell is the string "unavailable")."""
    return isinstance(value, int) or (isinstance(value, str) and value.isdigit())


def _stat_value(stat: Any, stat_names: dict[int, str]) -> Any:
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(stat, kind)
    return stat_names.get(value, value) if kind == "ref_value" else value
