"""Timing in rounds: the pipeline alone in windows, and the compute ceiling and end to end in
alternating rounds (ABAB...), each with the spread that says how sure its number is.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from feedgpu.bench.device import workers_agree
from feedgpu.bench.gpu_monitor import GpuMonitor
from feedgpu.bench.records import MIN_STEPS, PipelineRate, StepRate
from feedgpu.bench.spread import ROUNDS, Spread
from feedgpu.bench.steps import StepTimes, batch_size_of, time_steps
from feedgpu.progress import progress_bar

LEAD_STEPS = 3  # untimed steps starting each round after the first (see alternate_rounds)
# Draining a buffer refilled during a ceiling round: a batch that took this long was waited
# for (the buffer is empty), and never more batches than this (a pipeline far faster than the
# model keeps its buffer full whatever is taken).
DRAIN_BLOCKED_S = 0.001
DRAIN_MAX_BATCHES = 64


class PhaseProgress:
    """A tqdm bar per phase (none when quiet)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    @contextlib.contextmanager
    def phase(self, name: str, unit: str = "step") -> Iterator[Callable[[int], None]]:
        if self.quiet:
            yield lambda n: None
            return
        with progress_bar(desc=f"{name:<16}", unit=unit, leave=False) as bar:
            yield bar.update


def measure_pipeline(
    batches: Iterator[Any], seconds: float, progress: Callable[[int], None] | None = None
) -> PipelineRate:
    """Drain batches for `seconds` after a warm-up of a fifth of that; nothing consumes them.

    The timed part is cut into ROUNDS windows, whose rates give the spread.
    """
    t0 = time.perf_counter()
    next(batches)
    first = time.perf_counter() - t0
    warm_until = time.perf_counter() + max(0.5, seconds / 5)
    while time.perf_counter() < warm_until:
        next(batches)
    cpu0, start = time.process_time(), time.perf_counter()
    examples = count = 0
    windows: list[float] = []
    window_start, window_examples = start, 0
    while time.perf_counter() - start < seconds:
        size = batch_size_of(next(batches))
        examples += size
        window_examples += size
        count += 1
        now = time.perf_counter()
        if now - window_start >= seconds / ROUNDS:
            windows.append(window_examples / (now - window_start))
            window_start, window_examples = now, 0
        if progress:
            progress(1)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu0
    windows = windows or [examples / elapsed]
    rate = statistics.median(windows)  # the statistic the spread is built on: inside it
    return PipelineRate(
        first_batch_s=first,
        examples_per_s=rate,
        batches_per_s=rate * count / max(examples, 1),
        host_cpu_ms_per_example=1000 * cpu / max(examples, 1),
        num_batches=count,
        spread=Spread.of(windows),
    )


def alternate_rounds(
    step: Any,
    resident: list[Any] | None,
    batches: Iterator[Any],
    seconds: float,
    max_seconds: float,
    progress: PhaseProgress,
    agree: Callable[[bool], bool] | None = None,
) -> tuple[list[StepTimes], list[StepTimes]]:
    """The compute ceiling and end to end in alternating rounds (ABAB...), so that drift on a
    shared machine falls on both; each phase times at least MIN_STEPS steps and `seconds`,
    unless `max_seconds` runs out first.

    Each end-to-end round after the first starts from an empty buffer (`drain`): while the
    ceiling round ran, the pipeline filled its buffers, and those batches would come without
    waiting, hiding the wait of a pipeline slower than the model; then LEAD_STEPS untimed
    steps let the pipeline and the model settle into their shared pace.
    Each later ceiling round does too: the pipeline refills its buffers as it begins, on the
    cores the model's step needs, and the ceiling is the model alone.
    Without resident batches only end to end runs (its ceiling measured elsewhere). Workers
    of a multi-worker strategy stop each round together (`agree`, `device.workers_agree`).
    """
    per_round = seconds / ROUNDS
    min_steps = -(-MIN_STEPS // ROUNDS)
    seen: set[Any] = set()
    ceiling: list[StepTimes] = []
    together: list[StepTimes] = []
    cycle = itertools.cycle(resident or [])
    with progress.phase("ceiling | e2e" if resident else "end to end") as tick:
        for r in range(ROUNDS):
            for parts, source in ((ceiling, cycle), (together, batches)):
                if parts is ceiling and not resident:
                    continue
                if parts is together and r and resident:
                    drain(batches)
                parts.append(
                    time_steps(
                        step,
                        source,
                        seconds=per_round,
                        warmup_steps=2 if r == 0 else 0,
                        lead_steps=0 if r == 0 else LEAD_STEPS,
                        min_steps=min_steps,
                        max_seconds=max_seconds / ROUNDS,
                        seen=seen,
                        progress=tick,
                        agree=agree,
                    )
                )
    return ceiling, together


def drain(
    batches: Iterator[Any],
    clock: Callable[[], float] = time.perf_counter,
    limit: int = DRAIN_MAX_BATCHES,
) -> int:
    """Take buffered batches, untimed and untrained, until one has to be waited for (or
    `limit` were taken): the buffer is then empty, as a training run's steady state finds it.
    The batches taken."""
    for taken in range(1, limit + 1):
        start = clock()
        try:
            next(batches)
        except StopIteration:
            return taken - 1
        if clock() - start >= DRAIN_BLOCKED_S:
            return taken
    return limit


@dataclass
class ModelRun:
    """The model measured: the compute ceiling, end to end, the GPU monitor, the resident
    batches the ceiling ran on, and how long the first (compiling, untimed) step took."""

    ceiling: StepRate
    end_to_end: StepRate
    monitor: GpuMonitor
    resident: list[Any]
    compile_s: float
    other_xla_ms: float | None = None  # the step compiled the other way (time_other_xla)


def measure_model(
    step: Any,
    batches: Iterator[Any],
    setup: Any,
    seconds: float,
    max_seconds: float,
    progress: PhaseProgress,
    ceiling: StepRate | None = None,
) -> ModelRun:
    """The compute ceiling (the step on a few resident batches, copied to the GPU when there
    is one) and end to end (the step on `batches`), in alternating rounds; GPU utilisation
    sampled meanwhile. With `ceiling` given (measured once for two pipelines on one model),
    only end to end runs.

    The first step compiles (with XLA, minutes for a large model on a CPU): it runs alone,
    shown as compiling and never timed.
    """
    import tensorflow as tf

    # Resident batches: a few distinct ones, so bucketed text shows each shape it will meet
    # (and at least one call's worth for a model that trains several batches a call).
    per_call = int(getattr(step, "batches_per_call", 1))
    resident = [next(batches) for _ in range(max(8, per_call))]
    if setup.device_type == "GPU" and not setup.distributed:
        with tf.device("/gpu:0"):
            resident = [tf.nest.map_structure(tf.identity, b) for b in resident]
    first = resident[0] if per_call == 1 else tuple(resident[:per_call])
    with progress.phase("compiling (untimed)") as tick:
        t0 = time.perf_counter()
        float(step(first))
        compile_s = time.perf_counter() - t0
        tick(1)
    with GpuMonitor(enabled=setup.device_type == "GPU") as monitor:
        ceiling_rounds, together = alternate_rounds(
            step,
            None if ceiling else resident,
            batches,
            seconds,
            max_seconds,
            progress,
            workers_agree(setup),
        )
    return ModelRun(
        ceiling or StepRate.from_rounds(ceiling_rounds),
        StepRate.from_rounds(together),
        monitor,
        resident,
        compile_s,
    )


def profile_steps(
    step: Any, batches: Iterator[Any], logdir: str, steps: int, setup: Any = None
) -> None:
    """A TensorBoard profiler trace of `steps` training steps (after the timed phases, so the
    profiler's overhead never reaches the numbers); workers stop together (`workers_agree`)."""
    import tensorflow as tf

    from feedgpu.tf_private import trace_step

    tf.profiler.experimental.start(logdir)
    try:
        time_steps(
            step,
            batches,
            seconds=float("inf"),
            max_steps=steps,
            on_step=trace_step,
            agree=workers_agree(setup) if setup is not None else None,
        )
    finally:
        tf.profiler.experimental.stop()
