"""bench's records: what a measurement produced (the pipeline alone, the model consuming
batches, the ablation's rows), made by the timing code and read by the report, the advice and
the renderers, so none of those import each other for them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from feedgpu.bench.spread import Spread
from feedgpu.bench.steps import StepTimes
from feedgpu.pipeline.spec import PipelineSpec

MIN_STEPS = 20  # timed steps a phase needs (time allowing) before its verdict is told


@dataclass(frozen=True)
class PipelineRate:
    """The pipeline alone: how fast it delivers with nothing consuming.

    Attributes:
        first_batch_s: from creating the iterator to the first batch (start-up latency).
        examples_per_s: steady state, after warm-up.
        batches_per_s: steady state.
        host_cpu_ms_per_example: process CPU time per example while it ran.
        num_batches: batches timed.
        spread: examples/s over the timed windows.
    """

    first_batch_s: float
    examples_per_s: float
    batches_per_s: float
    host_cpu_ms_per_example: float
    num_batches: int
    spread: Spread | None = None


@dataclass(frozen=True)
class RoundSteps:
    """One round of a phase, step by step, for the report's timeline.

    Attributes:
        untimed: steps run first and not timed (compiling, warm-up, refilling buffers).
        steps: each timed step's (input wait, the rest of the step), in ms.
    """

    untimed: int
    steps: tuple[tuple[float, float], ...]

    @classmethod
    def of(cls, times: StepTimes) -> RoundSteps:
        pairs = zip(times.wait_s, times.compute_s, strict=True)
        return cls(times.warmup_steps, tuple((1000 * w, 1000 * c) for w, c in pairs))

    def to_json(self) -> dict[str, Any]:
        steps = [[round(w, 3), round(c, 3)] for w, c in self.steps]
        return {"untimed": self.untimed, "steps": steps}


@dataclass(frozen=True)
class StepRate:
    """The model consuming batches (the ceiling: resident batches; end to end: the pipeline).

    Attributes:
        examples_per_s: the median over the rounds of examples over their timed step time.
        step_ms_median: median step time (input wait included).
        step_ms_p90: 90th percentile step time.
        wait_ms_median: median time blocked waiting for a batch.
        input_share: the median over the rounds of their input wait over step time.
        num_steps: timed steps.
        total_s: the timed steps' total time (input wait included).
        warmup_steps: untimed steps (first steps and compiling shapes).
        loss_first: loss of the first timed step.
        loss_last: loss of the last timed step (lower: the model really trains).
        spread: examples/s over the rounds.
        share_spread: input share over the rounds.
        stopped_early: the time cap came before MIN_STEPS timed steps.
        rounds: each round step by step (the report's timeline).
    """

    examples_per_s: float
    step_ms_median: float
    step_ms_p90: float
    wait_ms_median: float
    input_share: float
    num_steps: int
    total_s: float
    warmup_steps: int
    loss_first: float | None
    loss_last: float | None
    spread: Spread | None = None
    share_spread: Spread | None = None
    stopped_early: bool = False
    rounds: tuple[RoundSteps, ...] = ()

    @classmethod
    def from_rounds(cls, rounds: list[StepTimes]) -> StepRate:
        """One phase measured in rounds: the whole, with each number's spread over them.

        The headline rate and input share are the median of the rounds, the statistic the
        spread is built on, so a headline always lies inside its own p10-p90.
        """
        whole = replace(
            cls.from_times(StepTimes.merged(rounds)),
            rounds=tuple(RoundSteps.of(r) for r in rounds),
        )
        timed = [r for r in rounds if r.wait_s]
        if not timed:
            return whole
        rates, shares = [r.examples_per_s for r in timed], [r.input_share for r in timed]
        return replace(
            whole,
            examples_per_s=statistics.median(rates),
            input_share=statistics.median(shares),
            spread=Spread.of(rates),
            share_spread=Spread.of(shares),
        )

    @classmethod
    def from_times(cls, times: StepTimes) -> StepRate:
        waits = sorted(times.wait_s)
        return cls(
            examples_per_s=times.examples_per_s,
            step_ms_median=times.step_ms(0.5),
            step_ms_p90=times.step_ms(0.9),
            wait_ms_median=1000 * waits[len(waits) // 2] if waits else 0.0,
            input_share=times.input_share,
            num_steps=len(times.wait_s),
            total_s=times.total_s,
            warmup_steps=times.warmup_steps,
            loss_first=times.losses[0] if times.losses else None,
            loss_last=times.losses[-1] if times.losses else None,
            stopped_early=times.stopped_early,
        )


@dataclass(frozen=True)
class AblationRow:
    """One variant of the pipeline, measured alone.

    Attributes:
        variant: what changed, e.g. "decode free" or "cache='memory'".
        stage: the stage made free (None for a setting).
        examples_per_s: the variant's rate.
        speedup: rate over the baseline measured in the same ablation.
        saved_ms_per_example: host time per example the free stage saves (stages only).
        spread: examples/s over the variant's timed windows.
        measurable: the spread clears the baseline's (and a free stage saves time); else "no
            measurable effect", and the speedup and saving are the noise's, not the variant's.
    """

    variant: str
    stage: str | None
    examples_per_s: float
    speedup: float
    saved_ms_per_example: float | None = None
    spread: Spread | None = None
    measurable: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "stage": self.stage,
            "examples_per_s": round(self.examples_per_s, 2),
            "speedup": round(self.speedup, 3),
            "saved_ms_per_example": None
            if self.saved_ms_per_example is None
            else round(self.saved_ms_per_example, 4),
            "spread": None if self.spread is None else self.spread.to_json(),
            "measurable": self.measurable,
        }


@dataclass(frozen=True)
class AblationResult:
    """Rows, the stage named (or None) and what to change, and the best measured spec.

    Attributes:
        baseline_examples_per_s: the unchanged pipeline, measured alongside the variants.
        baseline_spread: its examples/s over its timed windows.
        rows: one per variant.
        bottleneck: the stage costing most, when one costs at least MIN_SHARE_NAMED.
        advice: what to change, one line each.
        best_spec: the fastest spec among the baseline and the settings tried.
    """

    baseline_examples_per_s: float
    rows: tuple[AblationRow, ...]
    bottleneck: str | None
    advice: tuple[str, ...]
    best_spec: PipelineSpec
    baseline_spread: Spread | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON report's `ablation` (best_spec is the report's `spec` when it was kept)."""
        return {
            "baseline_examples_per_s": round(self.baseline_examples_per_s, 2),
            "baseline_spread": None
            if self.baseline_spread is None
            else self.baseline_spread.to_json(),
            "rows": [r.to_json() for r in self.rows],
            "bottleneck": self.bottleneck,
            "advice": list(self.advice),
        }
