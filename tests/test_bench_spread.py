"""Numbers that say how sure they are: spreads over rounds, "uncertain" verdicts, and a ceiling
beaten beyond the spread called a measurement problem, not 141%."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
import tensorflow as tf

from feedgpu.bench.advice import notes_for
from feedgpu.bench.device import resolve_devices
from feedgpu.bench.records import PipelineRate, StepRate
from feedgpu.bench.render import render_report
from feedgpu.bench.report import BenchReport, CapacityPlan
from feedgpu.bench.rounds import MIN_STEPS, PhaseProgress, alternate_rounds
from feedgpu.bench.spread import ROUNDS, Spread
from feedgpu.pipeline.spec import PipelineSpec


def test_spread_is_the_10th_to_90th_percentile_and_overlap_is_symmetric() -> None:
    spread = Spread.of([10, 20, 30, 40, 50])
    assert (spread.low, spread.high, spread.rounds) == (14, 46, 5)
    assert Spread.of([7]) == Spread(7, 7, 1)
    assert spread.overlaps(Spread(45, 60, 5)) and Spread(45, 60, 5).overlaps(spread)
    assert not spread.overlaps(Spread(47, 60, 5))


def _rate(rate: float, spread: Spread, share: float = 0.01, share_spread: Spread | None = None):
    return StepRate(
        rate, 10, 12, 10 * share, share, 40, 4.0, 2, 1.0, 0.5, spread,
        share_spread or Spread(share, share, 5),
    )  # fmt: skip


def _report(ceiling: StepRate, end_to_end: StepRate) -> BenchReport:
    return BenchReport(
        data_dir="d", split="train", kind="image", model="cnn-small", batch_size=32,
        accumulate=1, device=resolve_devices(), pipeline=PipelineRate(0.1, 900, 28, 1, 50),
        ceiling=ceiling, end_to_end=end_to_end, gpu_utilization=None, gpu_note="no GPU",
        ablation=None, capacity=CapacityPlan(1.0, 0.1, 2, 1), spec=PipelineSpec(data_dir="d"),
        profile_dir=None, seconds=1,
    )  # fmt: skip


def test_a_share_whose_spread_crosses_a_threshold_is_uncertain() -> None:
    ceiling = _rate(100, Spread(95, 105, 5))
    sure = _report(ceiling, _rate(90, Spread(88, 92, 5), 0.10, Spread(0.08, 0.12, 5)))
    assert sure.verdict == "moderately input-bound"
    unsure = _report(ceiling, _rate(90, Spread(88, 92, 5), 0.06, Spread(0.02, 0.12, 5)))
    assert unsure.verdict == "uncertain"
    assert unsure.verdict_range == ("saturated", "moderately input-bound")
    text = render_report(unsure)
    assert "verdict: uncertain" in text and "from saturated to moderately input-bound" in text
    assert unsure.to_json()["verdict"] == "uncertain"


def test_end_to_end_above_the_ceiling_beyond_the_spread_is_a_measurement_problem() -> None:
    report = _report(_rate(100, Spread(96, 104, 5)), _rate(141, Spread(130, 150, 5)))
    assert report.measurement_problem is not None
    text = render_report(report)
    assert "measurement problem: end to end (130-150 examples/s)" in text
    assert "141%" not in text
    inside = _report(_rate(100, Spread(90, 112, 5)), _rate(105, Spread(100, 110, 5)))
    assert inside.measurement_problem is None  # within the spreads: noise, not a problem
    early = _report(replace(_rate(100, Spread(90, 110, 5)), stopped_early=True), inside.end_to_end)
    assert any(n.startswith("compute ceiling timed only 40 steps") for n in notes_for(early))


def test_ceiling_and_end_to_end_alternate_and_time_their_minimum_of_steps() -> None:
    order: list[str] = []

    def step(batch: tf.Tensor) -> float:
        order.append("c" if float(batch[0]) == 0 else "e")
        return 0.0

    resident = [tf.zeros([4])]
    data = iter(lambda: tf.ones([4]), None)
    ceiling, together = alternate_rounds(step, resident, data, 0.05, 5.0, PhaseProgress(True))
    assert len(ceiling) == len(together) == ROUNDS
    assert sum(len(r.wait_s) for r in ceiling) >= MIN_STEPS  # 0.05 s would time fewer
    assert sum(len(r.wait_s) for r in together) >= MIN_STEPS
    runs = "".join(k for i, k in enumerate(order) if i == 0 or order[i - 1] != k)
    assert runs == "ce" * ROUNDS  # ABAB...

    def slow(batch: tf.Tensor) -> float:
        time.sleep(0.02)
        return 0.0

    capped, _ = alternate_rounds(slow, resident, data, 0.01, 0.05, PhaseProgress(True))
    assert any(r.stopped_early for r in capped)
    assert sum(len(r.wait_s) for r in capped) < MIN_STEPS


@pytest.mark.parametrize("values", [[1.0, 1.0, 1.0], [3.0, 1.0, 2.0, 5.0, 4.0]])
def test_spread_bounds_its_values(values: list[float]) -> None:
    spread = Spread.of(values)
    assert min(values) <= spread.low <= spread.high <= max(values)


def test_a_buffer_refilled_during_a_ceiling_round_is_drained_before_end_to_end() -> None:
    from feedgpu.bench.rounds import DRAIN_BLOCKED_S, drain

    now = [0.0]

    def pipeline(buffered: int):  # `buffered` batches at once, then each one waited for
        for i in range(100):
            if i >= buffered:
                now[0] += 10 * DRAIN_BLOCKED_S
            yield i

    batches = pipeline(7)
    assert drain(batches, clock=lambda: now[0]) == 8  # the 7 buffered, and one waited for
    assert next(batches) == 8
    fast = pipeline(1000)  # never waited for: at most the limit is taken
    assert drain(fast, clock=lambda: now[0], limit=5) == 5 and next(fast) == 5
    assert drain(iter(range(3)), clock=lambda: now[0]) == 3  # an end is no error
