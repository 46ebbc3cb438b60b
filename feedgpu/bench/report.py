"""What `bench-input` reports: the measured rates, the verdict, and the report as text and JSON.

The JSON form follows BENCH_REPORT_SCHEMA (a JSON Schema, also printed by
`feedgpu bench-input --print-schema`), so other tools can rely on its fields.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from feedgpu.bench.ablation import AblationResult
from feedgpu.bench.device import DeviceSetup
from feedgpu.bench.schema import SCHEMA_ID
from feedgpu.bench.steps import StepTimes
from feedgpu.pipeline.spec import PipelineSpec

SATURATED_SHARE = 0.05  # the TF Profiler's input-bound thresholds
HIGHLY_SHARE = 0.20


@dataclass(frozen=True)
class PipelineRate:
    """The pipeline alone: how fast it delivers with nothing consuming.

    Attributes:
        first_batch_s: from creating the iterator to the first batch (start-up latency).
        examples_per_s: steady state, after warm-up.
        batches_per_s: steady state.
        host_cpu_ms_per_example: process CPU time per example while it ran.
        num_batches: batches timed.
    """

    first_batch_s: float
    examples_per_s: float
    batches_per_s: float
    host_cpu_ms_per_example: float
    num_batches: int


@dataclass(frozen=True)
class StepRate:
    """The model consuming batches (the ceiling: resident batches; end to end: the pipeline).

    Attributes:
        examples_per_s: examples over the total of timed step times.
        step_ms_median: median step time (input wait included).
        step_ms_p90: 90th percentile step time.
        wait_ms_median: median time blocked waiting for a batch.
        input_share: input wait over step time, summed over the timed steps.
        num_steps: timed steps.
        total_s: the timed steps' total time (input wait included).
        warmup_steps: untimed steps (first steps and compiling shapes).
        loss_first: loss of the first timed step.
        loss_last: loss of the last timed step (lower: the model really trains).
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
        )


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
    spec: PipelineSpec
    profile_dir: str | None
    seconds: float

    @property
    def input_share(self) -> float:
        return self.end_to_end.input_share

    @property
    def fraction_of_ceiling(self) -> float:
        ceiling = self.ceiling.examples_per_s
        return self.end_to_end.examples_per_s / ceiling if ceiling else 0.0

    @property
    def verdict(self) -> str:
        return verdict_for(self.input_share)

    def to_json(self) -> dict[str, Any]:
        def rounded(obj: Any) -> dict[str, Any]:
            return {k: round(v, 4) if isinstance(v, float) else v for k, v in obj.__dict__.items()}

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
            "gpu_utilization": self.gpu_utilization,
            "gpu_note": self.gpu_note,
            "ablation": None
            if self.ablation is None
            else {
                "baseline_examples_per_s": round(self.ablation.baseline_examples_per_s, 2),
                "rows": [r.to_json() for r in self.ablation.rows],
                "bottleneck": self.ablation.bottleneck,
                "advice": list(self.ablation.advice),
            },
            "capacity": rounded(self.capacity),
            "spec": json_spec(self.spec),
            "profile_dir": self.profile_dir,
            "seconds_per_phase": self.seconds,
        }


def json_spec(spec: PipelineSpec) -> dict[str, Any]:
    return dict(json.loads(spec.to_json()))


def verdict_for(input_share: float) -> str:
    """The TF Profiler's classification of a step-time input share."""
    if input_share < SATURATED_SHARE:
        return "saturated"
    if input_share < HIGHLY_SHARE:
        return "moderately input-bound"
    return "highly input-bound"


# A gap to the ceiling larger than the input wait by this much means the steps themselves run
# slower end to end: the pipeline and the model compete for the host (measured here: steps
# 1.15-1.4x slower on a 2-core CPU-only host).
CONTENTION_GAP = 0.05


def render_report(report: BenchReport) -> str:
    """The report as a readable table with the verdict, the reasons and what to change."""
    device = report.device
    xla = "XLA" if device.xla else "no XLA"
    lines = [
        f"bench-input: {report.model} on {device.device_type} ({device.precision}, {xla}, "
        f"{device.num_replicas} replica(s)); batch {report.batch_size}"
        + (f" in {report.accumulate} micro-batches" if report.accumulate > 1 else "")
        + f"; {report.data_dir} [{report.split}]",
        f"  {'phase':<18}{'examples/s':>12}  {'step ms p50 / p90':>18}  {'input wait':>10}",
    ]
    p, c, e = report.pipeline, report.ceiling, report.end_to_end
    lines.append(
        f"  {'pipeline alone':<18}{p.examples_per_s:>12.1f}  "
        f"{'first batch ' + format(p.first_batch_s, '.2f') + ' s':>18}"
    )
    for name, rate in (("compute ceiling", c), ("end to end", e)):
        steps = f"{rate.step_ms_median:.1f} / {rate.step_ms_p90:.1f}"
        wait = f"{rate.input_share:.1%}" if rate is e else ""
        lines.append(f"  {name:<18}{rate.examples_per_s:>12.1f}  {steps:>18}  {wait:>10}")
    bound = (
        "< 5%"
        if report.verdict == "saturated"
        else ("5-20%" if report.verdict.startswith("moderately") else ">= 20%")
    )
    lines.append(
        f"verdict: {report.verdict}: input wait is {report.input_share:.1%} of step time "
        f"({bound}); end to end runs at {report.fraction_of_ceiling:.0%} of the compute ceiling"
    )
    compute_ms = e.step_ms_median - e.wait_ms_median
    unexplained = (1 - report.fraction_of_ceiling) - report.input_share
    if c.step_ms_median and unexplained > CONTENTION_GAP:
        # Said so as not to contradict an input-bound verdict: then it is the rest of the gap.
        lead = (
            "the gap to the ceiling is not input wait"
            if report.input_share < SATURATED_SHARE
            else f"input wait explains {report.input_share:.0%} of step time, and the rest of "
            "the gap is not input wait"
        )
        lines.append(
            f"note: {lead}: steps compute "
            f"{compute_ms / c.step_ms_median:.2f}x slower end to end ({compute_ms:.0f} vs "
            f"{c.step_ms_median:.0f} ms) because the pipeline competes with the model for the host"
            + (" (expected on a CPU-only host)" if device.device_type == "CPU" else "")
        )
    if p.examples_per_s < c.examples_per_s:
        lines.append(
            f"the pipeline alone delivers {p.examples_per_s / c.examples_per_s:.0%} of what the "
            "model can consume"
        )
    plan = report.capacity
    lines.append(
        f"capacity: the pipeline costs {plan.host_cpu_ms_per_example:.2f} ms of host CPU per "
        f"example; feeding the ceiling ({c.examples_per_s:.0f} examples/s) takes "
        f"{plan.cores_needed:.2f} cores (this host has {plan.host_cores})"
        + (
            f": {plan.hosts_needed} hosts or tf.data service workers of this size"
            if plan.hosts_needed > 1
            else ""
        )
    )
    if plan.service_workers:
        lines.append(
            f"tf.data service: {plan.service_workers} worker(s) deliver "
            f"{p.examples_per_s:.0f} examples/s; {plan.service_workers_needed} would keep the "
            f"model at its ceiling"
        )
    if report.gpu_utilization is not None:
        lines.append(f"GPU utilisation (NVML) end to end: {report.gpu_utilization:.0%}")
    elif device.device_type == "GPU":
        lines.append(f"GPU utilisation: not sampled ({report.gpu_note})")
    if report.ablation:
        a = report.ablation
        lines.append("ablation (pipeline alone; each stage made free in turn):")
        lines.append(f"  {'baseline':<22}{a.baseline_examples_per_s:>12.1f}")
        for row in a.rows:
            saved = (
                f"  saves {row.saved_ms_per_example:.3f} ms/example"
                if row.saved_ms_per_example is not None
                else ""
            )
            lines.append(
                f"  {row.variant:<22}{row.examples_per_s:>12.1f}  {row.speedup:>5.2f}x{saved}"
            )
        lines.extend(f"to change: {line}" for line in a.advice)
    if report.profile_dir:
        lines.append(f"profile: tensorboard --logdir {report.profile_dir} (Profile tab)")
    lines.extend(f"note: {note}" for note in device.notes)
    return "\n".join(lines)
