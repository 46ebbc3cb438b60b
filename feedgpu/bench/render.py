"""`bench-input`'s report as readable text: the table with spreads, the verdict, the reasons,
and what to change."""

from __future__ import annotations

from feedgpu.bench.report import BenchReport
from feedgpu.bench.spread import Spread


def _range(spread: Spread | None, form: str) -> str:
    if spread is None or spread.rounds < 2:
        return "-"
    return f"{format(spread.low, form)}-{format(spread.high, form)}"


def _ran_as(report: BenchReport) -> str:
    """What the timed step ran as: the model's policy, XLA or not and why, replicas."""
    device, run = report.device, report.run
    if run is None:
        return f"{device.precision}, {'XLA' if device.xla else 'no XLA'}"
    xla = f"{'XLA' if run.xla else 'no XLA'}: {run.xla_reason}"
    per_call = f", {run.steps_per_execution} steps a call" if run.steps_per_execution > 1 else ""
    return f"{run.policy}, {xla}{per_call}"


def _batches(ran_with: dict[str, object]) -> str:
    """`128x128 uint8, batch 32` or `length 128, batch 32`."""
    parts = []
    size = ran_with.get("image_size")
    if isinstance(size, (tuple, list)):
        parts.append(f"{size[0]}x{size[1]} {ran_with.get('dtype', '')}".strip())
    if ran_with.get("max_length"):
        parts.append(f"length {ran_with['max_length']}")
    parts.append(f"batch {ran_with.get('batch_size', '?')}")
    return ", ".join(parts)


def render_report(report: BenchReport) -> str:
    """The report as a readable table with the verdict, the reasons and what to change."""
    lines = [*_table_lines(report), *_verdict_lines(report), *_capacity_lines(report)]
    if report.ablation:
        lines += _ablation_lines(report)
    lines.extend(f"to change: {line}" for line in report.advice)
    if report.profile_dir:
        lines.append(f"profile: tensorboard --logdir {report.profile_dir} (Profile tab)")
    if report.compared:
        lines += _side_by_side_lines(report)
    lines.extend(f"note: {note}" for note in (*report.notes, *report.device.notes))
    return "\n".join(lines)


def _table_lines(report: BenchReport) -> list[str]:
    """The header (what ran, on what) and the three phases with their spreads."""
    device = report.device
    lines = [
        f"bench-input: {report.model} on {device.device_type} ({_ran_as(report)}, "
        f"{device.num_replicas} replica(s)); batch {report.batch_size}"
        + (f" in {report.accumulate} micro-batches" if report.accumulate > 1 else "")
        + f"; {report.data_dir} [{report.split}]",
        f"  {'phase':<18}{'examples/s':>12}{'p10-p90':>17}  {'step ms p50 / p90':>18}"
        f"  {'input wait (p10-p90)':>22}",
    ]
    p, c, e = report.pipeline, report.ceiling, report.end_to_end
    lines.append(
        f"  {'pipeline alone':<18}{p.examples_per_s:>12.1f}{_range(p.spread, '.0f'):>17}  "
        f"{'first batch ' + format(p.first_batch_s, '.2f') + ' s':>18}"
    )
    for name, rate in (("compute ceiling", c), ("end to end", e)):
        steps = f"{rate.step_ms_median:.1f} / {rate.step_ms_p90:.1f}"
        wait = ""
        if rate is e:
            wait = f"{rate.input_share:.1%} ({_range(rate.share_spread, '.1%')})"
        lines.append(
            f"  {name:<18}{rate.examples_per_s:>12.1f}{_range(rate.spread, '.0f'):>17}  "
            f"{steps:>18}  {wait:>22}"
        )
    return lines


def _verdict_lines(report: BenchReport) -> list[str]:
    """The verdict with its share, and a measurement problem."""
    e = report.end_to_end
    low, high = report.verdict_range
    if report.verdict == "uncertain":
        reason = report.uncertain_reason
        if reason and reason == report.measurement_problem:  # told in full on its own line
            why = "end to end ran faster than the compute ceiling"
        elif reason:
            why = reason
        else:
            why = (
                f"it ranged {_range(e.share_spread, '.1%')} over the rounds, from {low} to "
                f"{high}; rerun with more --seconds on a quieter machine"
            )
        lines = [
            f"verdict: uncertain: input wait is {report.input_share:.1%} of step time, but {why}"
        ]
    else:
        bound = {"saturated": "< 5%", "moderately input-bound": "5-20%"}.get(low, ">= 20%")
        lines = [
            f"verdict: {report.verdict}: input wait is {report.input_share:.1%} of step time "
            f"({bound}); end to end runs at {report.fraction_of_ceiling:.0%} of the compute "
            "ceiling"
        ]
    if report.measurement_problem:
        lines.append(f"measurement problem: {report.measurement_problem}")
    return lines


def _capacity_lines(report: BenchReport) -> list[str]:
    """What feeding the ceiling takes (cores, hosts, service workers), and GPU utilisation."""
    p, c, device = report.pipeline, report.ceiling, report.device
    lines = []
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
    return lines


def _ablation_lines(report: BenchReport) -> list[str]:
    """The ablation's rows: each stage made free, each setting tried."""
    a = report.ablation
    assert a is not None
    lines: list[str] = []
    lines.append("ablation (pipeline alone; each stage made free in turn; wall time saved):")
    lines.append(
        f"  {'baseline':<22}{a.baseline_examples_per_s:>12.1f}"
        f"{_range(a.baseline_spread, '.0f'):>17}"
    )
    for row in a.rows:
        effect = "  no measurable effect (inside the baseline's spread)"
        if row.measurable:
            effect = f"  {row.speedup:>5.2f}x" + (
                f"  saves {row.saved_ms_per_example:.3f} ms/example"
                if row.saved_ms_per_example is not None
                else ""
            )
        lines.append(
            f"  {row.variant:<22}{row.examples_per_s:>12.1f}{_range(row.spread, '.0f'):>17}"
            + effect
        )
    return lines


def _side_by_side_lines(report: BenchReport) -> list[str]:
    """The user's pipeline and feedgpu's, against the one ceiling they share."""
    c, e, p = report.ceiling, report.end_to_end, report.pipeline
    o = report.compared
    assert o is not None
    lines: list[str] = []
    lines.append(
        f"side by side on {report.model}, one compute ceiling {c.examples_per_s:,.0f} "
        f"examples/s ({_range(c.spread, ',.0f')}), both at {_batches(report.ran_with)}:"
    )
    lines.append(
        f"  {report.data_dir}: {e.examples_per_s:,.0f} examples/s "
        f"({_range(e.spread, ',.0f')}), {report.verdict} ({report.input_share:.0%}); "
        f"pipeline alone {p.examples_per_s:,.0f}"
    )
    lines.append(
        f"  feedgpu's on {o.data_dir}: {o.examples_per_s:,.0f} examples/s "
        f"({_range(o.spread, ',.0f')}), {o.verdict} ({o.input_share:.0%}); "
        f"pipeline alone {o.pipeline_examples_per_s:,.0f}"
    )
    if o.ran_with != report.ran_with:
        lines.append(f"  (feedgpu's batches: {_batches(o.ran_with)})")
    return lines
