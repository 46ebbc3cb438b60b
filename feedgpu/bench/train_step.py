"""The step bench-input times, and what it ran as: the user's model as `model.fit` runs it (its
XLA setting, dtype policy and steps_per_execution), or a built-in workload; and the same step
without XLA, timed briefly, so a report can say when the other choice is much faster here.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from typing import Any

from feedgpu.bench.device import DeviceSetup
from feedgpu.bench.models import build_workload
from feedgpu.bench.steps import make_train_step
from feedgpu.bench.user_model import ModelFit, make_model_step

# The other XLA choice is named when it is at least this much faster per step.
XLA_NOTE_RATIO = 1.5
OTHER_XLA_STEPS = 5  # timed steps of the comparison (after one that compiles)


@dataclass(frozen=True)
class StepSettings:
    """What the timed train step ran as.

    Attributes:
        xla: whether it ran with XLA.
        xla_reason: why (the model's jit_compile, --xla, the built-in default, a fallback).
        policy: the Keras dtype policy it computed in.
        steps_per_execution: batches each call trained on (the model's, as model.fit runs).
        other_xla_step_ms: the same step compiled the other way, median ms over a few
            resident batches: without XLA when it ran with it; with XLA when it ran without, on
            a GPU only (on a CPU-only host an XLA compile can take minutes, and Keras's own
            "auto" keeps XLA off there).
        compile_s: the first step's time, compiling (not timed).
    """

    xla: bool
    xla_reason: str
    policy: str
    steps_per_execution: int = 1
    other_xla_step_ms: float | None = None
    compile_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "xla": self.xla,
            "xla_reason": self.xla_reason,
            "policy": self.policy,
            "steps_per_execution": self.steps_per_execution,
            "other_xla_step_ms": None
            if self.other_xla_step_ms is None
            else round(self.other_xla_step_ms, 3),
            "compile_s": round(self.compile_s, 3),
        }


@dataclass
class TrainStep:
    """A step to time, its model's name, and how to compile it the other way."""

    step: Any  # with .xla, .xla_reason and .batches_per_call (FallbackStep, _BuiltinStep)
    name: str
    policy: str
    compiled_as: Any  # (xla: bool) -> a step like `step`, compiled with or without XLA

    @property
    def xla(self) -> bool:
        return bool(self.step.xla)

    def settings(
        self, other_xla_step_ms: float | None = None, compile_s: float = 0.0
    ) -> StepSettings:
        return StepSettings(
            xla=self.xla,
            xla_reason=self.step.xla_reason,
            policy=self.policy,
            steps_per_execution=int(self.step.batches_per_call),
            other_xla_step_ms=other_xla_step_ms,
            compile_s=compile_s,
        )


class _BuiltinStep:
    """A built-in workload's compiled step, with what it was compiled as."""

    batches_per_call = 1

    def __init__(self, fn: Any, xla: bool, xla_reason: str) -> None:
        self.fn, self.xla, self.xla_reason = fn, xla, xla_reason

    def __call__(self, batch: Any) -> Any:
        return self.fn(batch)


def train_step_for(
    model: Any,
    fit: ModelFit | None,
    kind: str,
    size: str,
    accumulate: int,
    setup: DeviceSetup,
    **shape: Any,
) -> TrainStep:
    """The user's model with its own train step, else the built-in workload `size` sized by
    `shape` (build_workload's arguments)."""
    if model is not None:
        assert fit is not None
        step = make_model_step(model, fit, setup)
        policy = str(getattr(getattr(model, "dtype_policy", None), "name", setup.precision))
        return TrainStep(step, f"{model.name} (yours)", policy, step.compiled_as)
    workload = build_workload(kind, size, setup, **shape)
    auto = "built-in model on a GPU" if setup.xla else "built-in model on a CPU-only host"
    reason = {"on": "--xla on", "off": "--xla off"}.get(setup.xla_rule, auto)

    def built(xla: bool, why: str) -> _BuiltinStep:
        return _BuiltinStep(
            make_train_step(workload, replace(setup, xla=xla), accumulate), xla, why
        )

    return TrainStep(
        built(setup.xla, reason), workload.name, setup.precision, lambda x: built(x, "compared")
    )


def time_other_xla(train: TrainStep, resident: list[Any], device_type: str) -> float | None:
    """The step compiled the other way on the resident batches: median ms a step (None when
    not measured: see StepSettings.other_xla_step_ms)."""
    if not train.xla and device_type != "GPU":
        return None
    other = train.compiled_as(not train.xla)
    per_call = int(getattr(other, "batches_per_call", 1))

    def call(i: int) -> None:
        group = [resident[(i * per_call + k) % len(resident)] for k in range(per_call)]
        float(other(group[0] if per_call == 1 else tuple(group)))

    call(0)  # traces
    times = []
    for i in range(1, OTHER_XLA_STEPS + 1):
        t0 = time.perf_counter()
        call(i)
        times.append((time.perf_counter() - t0) / per_call)
    return 1000 * statistics.median(times)


def xla_note(settings: StepSettings, ceiling_step_ms: float) -> str | None:
    """One line when the step compiled the other way was much faster here."""
    other = settings.other_xla_step_ms
    if not other or not ceiling_step_ms or ceiling_step_ms < XLA_NOTE_RATIO * other:
        return None
    ratio = ceiling_step_ms / other
    if settings.xla:
        return (
            f"XLA makes this step slower here: {ceiling_step_ms:.0f} ms a step with it, "
            f"{other:.0f} ms without ({ratio:.1f}x); measure with --xla off, or compile the "
            "model with jit_compile=False (Keras's 'auto' does on CPU-only hosts)"
        )
    return (
        f"XLA would make this step faster here: {ceiling_step_ms:.0f} ms a step without it, "
        f"{other:.0f} ms with ({ratio:.1f}x); measure with --xla on, or compile the model with "
        "jit_compile=True"
    )
