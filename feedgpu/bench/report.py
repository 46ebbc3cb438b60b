"""What `bench-input` reports: the measured rates, the verdict, and the report as text and JSON.

The JSON form follows BENCH_REPORT_SCHEMA (a JSON Schema, also printed by
`feedgpu bench-input --print-schema`), so other tools can rely on its fields.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from feedgpu.bench.device import DeviceSetup
from feedgpu.bench.records import MIN_STEPS, AblationResult, PipelineRate, StepRate
from feedgpu.bench.schema import HIGHLY_SHARE, SATURATED_SHARE, SCHEMA_ID
from feedgpu.bench.spread import Spread
from feedgpu.bench.stage_settings import StageSettings
from feedgpu.bench.train_step import StepSettings
from feedgpu.pipeline.spec import PipelineSpec

# End to end this far above the ceiling means the phases met different conditions.
BEYOND_CEILING = 1.10


@dataclass(frozen=True)
class CapacityPlan:
    """Host capacity needed to keep the model at its ceiling, from the measured host cost.

    Attributes:
        host_cpu_ms_per_example: CPU time the pipeline spends per example.
        cores_needed: cores that, fully busy, deliver the ceiling's examples/s.
        host_cores: cores on this host.
        hosts_needed: hosts (or tf.data service workers) of this size that deliver it.
        service_workers: tf.data service workers the pipeline ran on (None: local).
        service_workers_needed: workers like them that deliver the ceiling, from the
            measured rate per worker (None: local).
    """

    host_cpu_ms_per_example: float
    cores_needed: float
    host_cores: int
    hosts_needed: int
    service_workers: int | None = None
    service_workers_needed: int | None = None

    @classmethod
    def of(
        cls, alone: PipelineRate, ceiling: StepRate, service_workers: int | None
    ) -> CapacityPlan:
        """From the pipeline's measured host cost and the model's ceiling."""
        cores = os.cpu_count() or 1
        needed = ceiling.examples_per_s * alone.host_cpu_ms_per_example / 1000
        workers_needed = None
        if service_workers:
            per_worker = alone.examples_per_s / service_workers
            workers_needed = max(1, math.ceil(ceiling.examples_per_s / per_worker))
        return cls(
            host_cpu_ms_per_example=alone.host_cpu_ms_per_example,
            cores_needed=needed,
            host_cores=cores,
            hosts_needed=max(1, math.ceil(needed / cores)),
            service_workers=service_workers,
            service_workers_needed=workers_needed,
        )


@dataclass(frozen=True)
class Compared:
    """Another pipeline measured on the same model against the same compute ceiling (measured
    once), for a side-by-side line.

    Attributes:
        data_dir: what it read.
        examples_per_s: end to end.
        input_share: end to end.
        verdict: its verdict.
        fraction_of_ceiling: end to end over the shared compute ceiling.
        spread: its end-to-end examples/s over the rounds.
        ran_with: the batches it gave (image size or length, batch size, dtype).
        pipeline_examples_per_s: the pipeline alone.
    """

    data_dir: str
    examples_per_s: float
    input_share: float
    verdict: str
    fraction_of_ceiling: float
    spread: Spread | None = None
    ran_with: dict[str, Any] = field(default_factory=dict)
    pipeline_examples_per_s: float = 0.0

    @classmethod
    def of(cls, report: BenchReport) -> Compared:
        e = report.end_to_end
        return cls(
            report.data_dir,
            e.examples_per_s,
            e.input_share,
            report.verdict,
            report.fraction_of_ceiling,
            e.spread,
            dict(report.ran_with),
            report.pipeline.examples_per_s,
        )


@dataclass(frozen=True)
class BenchReport:
    """Everything `bench-input` measured and concluded; `to_json` follows BENCH_REPORT_SCHEMA."""

    data_dir: str
    split: str
    kind: str
    model: str
    batch_size: int
    accumulate: int
    device: DeviceSetup
    pipeline: PipelineRate
    ceiling: StepRate
    end_to_end: StepRate
    gpu_utilization: float | None
    gpu_note: str | None
    ablation: AblationResult | None
    capacity: CapacityPlan
    spec: PipelineSpec | None  # None: the user's own tf.data pipeline
    profile_dir: str | None
    seconds: float
    notes: tuple[str, ...] = ()
    compared: Compared | None = None  # feedgpu's pipeline on the same model, beside the user's
    run: StepSettings | None = None  # what the timed step ran as (XLA, policy, steps a call)
    ran_with: dict[str, Any] = field(default_factory=dict)  # the batches: size, batch, dtype
    advice: tuple[str, ...] = ()  # what to change (bench.advice.advice_for)
    stages: StageSettings | None = None  # each stage's parallelism and buffers, as TF ran it
    environment: dict[str, Any] = field(default_factory=dict)  # versions, cores, command

    @property
    def input_share(self) -> float:
        return self.end_to_end.input_share

    @property
    def fraction_of_ceiling(self) -> float:
        ceiling = self.ceiling.examples_per_s
        return self.end_to_end.examples_per_s / ceiling if ceiling else 0.0

    @property
    def verdict(self) -> str:
        """verdict_for the input share, or "uncertain" when its spread spans two verdicts or
        the phases cannot decide (see uncertain_reason)."""
        low, high = self.verdict_range
        return low if low == high and not self.uncertain_reason else "uncertain"

    @property
    def uncertain_reason(self) -> str | None:
        """Why the phases are too short or too odd to give a verdict, if they are."""
        short = [
            f"{name} timed only {rate.num_steps} steps"
            for name, rate in (
                ("the compute ceiling", self.ceiling),
                ("end to end", self.end_to_end),
            )
            if rate.num_steps < MIN_STEPS
        ]
        if short:
            return (
                f"{' and '.join(short)} (fewer than {MIN_STEPS}): raise --max-seconds or "
                "lower --batch-size"
            )
        if self.measurement_problem:
            return self.measurement_problem
        if self.fraction_of_ceiling > BEYOND_CEILING:
            return (
                f"end to end ran at {self.fraction_of_ceiling:.0%} of the compute ceiling, which "
                "it cannot beat: the two phases met different conditions (the machine's load, "
                "their batches); rerun with more --seconds on a quieter machine"
            )
        return None

    @property
    def verdict_range(self) -> tuple[str, str]:
        """The verdicts at the low and the high end of the input share's spread."""
        share = self.end_to_end.share_spread
        if share is None or share.rounds < 2:
            return verdict_for(self.input_share), verdict_for(self.input_share)
        return verdict_for(share.low), verdict_for(share.high)

    @property
    def measurement_problem(self) -> str | None:
        """Why the numbers cannot be read as they stand, if they cannot."""
        c, e = self.ceiling.spread, self.end_to_end.spread
        if c is None or e is None or min(c.rounds, e.rounds) < 2 or e.low <= c.high:
            return None
        return (
            f"end to end ({e.low:.0f}-{e.high:.0f} examples/s) ran faster than the compute "
            f"ceiling ({c.low:.0f}-{c.high:.0f}) beyond their spreads: the machine's load "
            "changed during the run or the two phases met different batches; rerun with more "
            "--seconds on a quieter machine"
        )

    def to_json(self) -> dict[str, Any]:
        def rounded(obj: Any) -> dict[str, Any]:
            return {k: _json_value(v) for k, v in obj.__dict__.items()}

        return {
            "schema": SCHEMA_ID,
            "data_dir": self.data_dir,
            "split": self.split,
            "kind": self.kind,
            "model": self.model,
            "batch_size": self.batch_size,
            "accumulate": self.accumulate,
            "device": self.device.to_json(),
            "pipeline": rounded(self.pipeline),
            "ceiling": rounded(self.ceiling),
            "end_to_end": rounded(self.end_to_end),
            "input_share": round(self.input_share, 4),
            "fraction_of_ceiling": round(self.fraction_of_ceiling, 4),
            "verdict": self.verdict,
            "verdict_range": list(self.verdict_range),
            "measurement_problem": self.measurement_problem,
            "gpu_utilization": self.gpu_utilization,
            "gpu_note": self.gpu_note,
            "uncertain_reason": self.uncertain_reason,
            "advice": list(self.advice),
            "run": None if self.run is None else self.run.to_json(),
            "ran_with": {k: _json_value(v) for k, v in self.ran_with.items()},
            "ablation": None if self.ablation is None else self.ablation.to_json(),
            "capacity": rounded(self.capacity),
            "spec": None if self.spec is None else json_spec(self.spec),
            "spec_reasons": [] if self.spec is None else [list(r) for r in self.spec.reasons],
            "stages": None if self.stages is None else self.stages.to_json(),
            "environment": dict(self.environment),
            "notes": list(self.notes),
            "compared": None if self.compared is None else rounded(self.compared),
            "profile_dir": self.profile_dir,
            "seconds_per_phase": self.seconds,
        }


def _json_value(value: Any) -> Any:
    if hasattr(value, "to_json"):  # a Spread, a record of its own
        return value.to_json()
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    return round(value, 4) if isinstance(value, float) else value


def json_spec(spec: PipelineSpec) -> dict[str, Any]:
    return dict(json.loads(spec.to_json()))


def verdict_for(input_share: float) -> str:
    """The TF Profiler's classification of a step-time input share."""
    if input_share < SATURATED_SHARE:
        return "saturated"
    if input_share < HIGHLY_SHARE:
        return "moderately input-bound"
    return "highly input-bound"
