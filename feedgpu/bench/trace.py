"""Input wait read from a TensorFlow profiler trace, in process: what the TF Profiler's Input
Pipeline Analyzer shows, without TensorBoard.

`tf.profiler.experimental.start/stop` write an XSpace protobuf (`*.xplane.pb`). On its host
plane each call of a compiled training function is an event named after the function (Keras:
`multi_step_on_iterator`), and each batch fetched is an `IteratorGetNextOp::DoCompute` event
(`IteratorGetNextAsOptionalOp` with `steps_per_execution > 1`, a `MultiDeviceIterator...` op
under a distribution strategy). A fetch can run beside the step's compute (with
`steps_per_execution > 1` the loop fetches the next batch while the current one trains): only
the part of it when no op of the step was running is input wait.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from feedgpu.bench.report import verdict_for
from feedgpu.bench.xplane import newest_planes

# Keras's compiled train functions (TensorFlow backend), by the name their calls trace as.
KERAS_STEPS = ("multi_step_on_iterator", "one_step_on_iterator")
_GET_NEXT = re.compile(r"Iterator\w*GetNext\w*Op::DoCompute")
_OP = re.compile(r"[^:\s]+:([A-Za-z]\w*)")  # an op's event: "name:Type"


@dataclass(frozen=True)
class InputWindow:
    """Input wait over a window of training steps.

    Attributes:
        steps: batches the steps fetched in the window.
        seconds: the window's length (first step's start to last step's end).
        wait_s: time blocked fetching those batches.
        examples_per_step: batch size, when known (for examples/s).
        first_step: the window's first step (global), when known.
        epoch: the epoch it was measured in, when known.
    """

    steps: int
    seconds: float
    wait_s: float
    examples_per_step: int | None = None
    first_step: int | None = None
    epoch: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The window as a report draws it."""
        return {
            "epoch": self.epoch,
            "first_step": self.first_step,
            "steps": self.steps,
            "input_share": round(self.input_share, 4),
            "examples_per_s": None
            if self.examples_per_s is None
            else round(self.examples_per_s, 2),
            "step_ms": round(self.step_ms, 3),
            "verdict": self.verdict,
        }

    @property
    def input_share(self) -> float:
        return min(1.0, self.wait_s / self.seconds) if self.seconds > 0 else 0.0

    @property
    def verdict(self) -> str:
        return verdict_for(self.input_share)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def examples_per_s(self) -> float | None:
        if self.examples_per_step is None:
            return None
        return self.steps_per_s * self.examples_per_step

    @property
    def step_ms(self) -> float:
        return 1000 * self.seconds / self.steps if self.steps else 0.0

    def line(self) -> str:
        """One readable line: the share, the verdict, the rates."""
        where = (
            f"steps {self.first_step}-{self.first_step + self.steps - 1}: "
            if (self.first_step is not None)
            else ""
        )
        rate = f"{self.steps_per_s:.1f} steps/s"
        if self.examples_per_s is not None:
            rate += f", {self.examples_per_s:,.0f} examples/s"
        return (
            f"{where}input wait {self.input_share:.1%} of step time ({self.verdict}); "
            f"{self.step_ms:.1f} ms a step, {rate}"
        )


def read_window(
    logdir: str, step_names: tuple[str, ...] = KERAS_STEPS, wall_s: float | None = None
) -> InputWindow | None:
    """The input wait in the newest trace under logdir, or None when it holds no step.

    step_names: the training function's traced names; the window spans their calls. With
    wall_s instead (a custom loop's window, timed by the caller), every batch fetch in the
    trace counts, over that length.
    """
    steps: list[tuple[int, int]] = []
    fetches: list[tuple[int, int]] = []
    busy: list[tuple[int, int]] = []  # ops of the model running (host threads or devices)
    for plane in newest_planes(logdir):
        host = plane.name.startswith("/host:")
        if not host and not plane.name.startswith("/device:"):
            continue
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            base = line.timestamp_ns * 1000
            pipeline = line.name.startswith("tf_data")  # the input pipeline's own threads
            for event in line.events:
                name = names.get(event.metadata_id, "")
                span = (base + event.offset_ps, base + event.offset_ps + event.duration_ps)
                if host and name in step_names:
                    steps.append(span)
                elif host and _GET_NEXT.fullmatch(name):
                    fetches.append(span)
                elif not host or (not pipeline and _is_model_op(name)):
                    busy.append(span)
    if wall_s is not None:
        if not fetches:
            return None
        return InputWindow(len(fetches), wall_s, _uncovered(fetches, busy) / 1e12)
    if not steps:
        return None
    start, end = min(a for a, _ in steps), max(b for _, b in steps)
    inside = [(max(a, start), min(b, end)) for a, b in fetches if a < end and b > start]
    return InputWindow(len(inside), (end - start) / 1e12, _uncovered(inside, busy) / 1e12)


def _is_model_op(name: str) -> bool:
    op = _OP.fullmatch(name)
    return op is not None and "GetNext" not in op.group(1) and "Optional" not in op.group(1)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _uncovered(waits: list[tuple[int, int]], busy: list[tuple[int, int]]) -> int:
    """The length of the union of `waits` where nothing in `busy` ran (picoseconds)."""
    total = 0
    covers = _merged(busy)
    i = 0
    for a, b in _merged(waits):
        while i < len(covers) and covers[i][1] <= a:
            i += 1
        at, j = a, i
        while j < len(covers) and covers[j][0] < b:
            total += max(0, covers[j][0] - at)
            at = max(at, covers[j][1])
            j += 1
        total += max(0, b - at)
    return total
