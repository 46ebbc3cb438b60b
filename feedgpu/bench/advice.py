"""What to change, from the measured parts of a bench-input report: the ablation's finding, and
where input wait comes from when the pipeline alone is far faster than the model needs (then
more cores or service workers would not change it, and the advice never says they would)."""

from __future__ import annotations

from feedgpu.bench.report import SATURATED_SHARE, BenchReport
from feedgpu.bench.train_step import xla_note

# A gap to the ceiling larger than the input wait by this much means the steps themselves run
# slower end to end: the pipeline and the model compete for the host (benchmarks/RESULTS.md,
# "bench-input's verdict": on 2 cores the model computes slower beside the pipeline).
CONTENTION_GAP = 0.05
# The pipeline alone is "far above" the ceiling at this many times its rate: throughput is
# then not what makes the model wait.
HEADROOM = 2.0
# Advice that asks for more host capacity, as the ablation words it.
MORE_CAPACITY = ("add host cores / tf.data service workers", "add host cores or tf.data service")


def contention(report: BenchReport) -> float | None:
    """How much slower steps compute end to end than on resident batches (1.3 = 30%), when
    that explains a gap to the ceiling the input wait does not."""
    c, e = report.ceiling, report.end_to_end
    unexplained = (1 - report.fraction_of_ceiling) - report.input_share
    if not c.step_ms_median or unexplained <= CONTENTION_GAP:
        return None
    return (e.step_ms_median - e.wait_ms_median) / c.step_ms_median


def advice_for(report: BenchReport) -> tuple[str, ...]:
    """One line each: what to change. More cores or service workers are advised only when the
    capacity plan needs them (a core or more, or more workers than served); when the pipeline
    alone runs far above the ceiling, the line says where the wait comes from instead."""
    plan, p, c = report.capacity, report.pipeline, report.ceiling
    headroom = p.examples_per_s / c.examples_per_s if c.examples_per_s else 0.0
    more_workers = bool(plan.service_workers) and (
        (plan.service_workers_needed or 0) > (plan.service_workers or 0)
    )
    enough = plan.cores_needed < 1 and not more_workers
    lines: list[str] = []
    for line in report.ablation.advice if report.ablation else ():
        if enough and line.startswith("no single stage dominates"):
            continue  # "add cores" beside a plan of a fraction of a core: the wait is elsewhere
        if enough:
            for clause in MORE_CAPACITY:
                line = line.replace(f", or {clause}", "").replace(f" or {clause}", "")
        lines.append(line)
    bound = report.input_share >= SATURATED_SHARE and report.verdict != "uncertain"
    if bound and headroom >= HEADROOM:
        lines.append(_wait_source(report, headroom))
    return tuple(lines)


def _wait_source(report: BenchReport, headroom: float) -> str:
    """Where input wait comes from when the pipeline alone keeps up many times over."""
    plan, e = report.capacity, report.end_to_end
    lead = (
        f"the pipeline alone runs {headroom:.1f}x faster than the model consumes and feeding "
        f"it takes {plan.cores_needed:.2f} cores, so more cores or workers would not change "
        f"the {report.input_share:.0%} wait"
    )
    slower = contention(report)
    if slower and report.device.device_type == "CPU":
        return (
            f"{lead}: it comes from the pipeline and the model sharing this host's "
            f"{plan.host_cores} cores (steps compute {slower:.2f}x slower end to end): on an "
            "accelerator the model's compute leaves the host and this wait with it; on a "
            "CPU-only host it is the price of sharing, which no pipeline setting removes"
        )
    if slower:
        return (
            f"{lead}: it comes from host threads competing with the step's launch (steps "
            f"compute {slower:.2f}x slower end to end): keep other work off the host"
        )
    return (
        f"{lead}: it comes in bursts (median wait {e.wait_ms_median:.1f} ms of "
        f"{e.step_ms_median:.1f} ms steps; first batch {report.pipeline.first_batch_s:.2f} s), "
        "as when the prefetch buffer drains while the host is busy elsewhere: check that "
        "nothing else runs on this host, and measure with more --seconds"
    )


def notes_for(report: BenchReport) -> tuple[str, ...]:
    """What the measurement adds to its numbers, one line each, kept in the report itself so
    the terminal, the JSON and the page say the same: a phase the time cap cut short, a gap to
    the ceiling that is not input wait, the first step's compile time, the other XLA choice."""
    c, e = report.ceiling, report.end_to_end
    notes = [
        f"{name} timed only {rate.num_steps} steps ({rate.total_s:.0f} s, the cap): its spread "
        "is wide; raise --max-seconds or lower --batch-size"
        for name, rate in (("compute ceiling", c), ("end to end", e))
        if rate.stopped_early
    ]
    slower = contention(report)
    if slower and not report.measurement_problem:
        # Said so as not to contradict an input-bound verdict: then it is the rest of the gap.
        lead = (
            "the gap to the ceiling is not input wait"
            if report.input_share < SATURATED_SHARE
            else f"input wait explains {report.input_share:.0%} of step time, and the rest of "
            "the gap is not input wait"
        )
        notes.append(
            f"{lead}: steps compute {slower:.2f}x slower end to end "
            f"({e.step_ms_median - e.wait_ms_median:.0f} vs {c.step_ms_median:.0f} ms) because "
            "the pipeline competes with the model for the host"
            + (" (expected on a CPU-only host)" if report.device.device_type == "CPU" else "")
        )
    if report.run and report.run.compile_s >= 1:
        notes.append(f"the first step compiled in {report.run.compile_s:.0f} s (not timed)")
    other = xla_note(report.run, c.step_ms_median) if report.run else None
    return (*notes, *([other] if other else []))
