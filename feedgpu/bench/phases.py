"""The parts every bench-input run shares: the model measured on a pipeline's batches (the
ceiling, end to end, and the step without XLA), and the report made of the measured phases."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from feedgpu.bench.advice import advice_for, notes_for
from feedgpu.bench.device import DeviceSetup
from feedgpu.bench.options import BenchOptions
from feedgpu.bench.records import PipelineRate, StepRate
from feedgpu.bench.report import BenchReport
from feedgpu.bench.rounds import ModelRun, PhaseProgress, measure_model
from feedgpu.bench.stage_settings import StageSettings, trace_stage_settings
from feedgpu.bench.train_step import StepSettings, TrainStep, time_other_xla


def measure_step(
    train: TrainStep,
    batches: Any,
    setup: DeviceSetup,
    options: BenchOptions,
    progress: PhaseProgress,
    shared: tuple[TrainStep, StepRate] | None = None,
) -> ModelRun:
    """The ceiling (unless shared) and end to end; then the step compiled the other way
    (time_other_xla), briefly, so the report can say if that is much faster here."""
    measured = measure_model(
        train.step,
        batches,
        setup,
        options.seconds,
        options.cap_seconds,
        progress,
        ceiling=shared[1] if shared else None,
    )
    if not shared:
        with progress.phase("other XLA choice") as tick:
            measured.other_xla_ms = time_other_xla(train, measured.resident, setup.device_type)
            tick(1)
    return measured


def make_report(
    options: BenchOptions,
    setup: DeviceSetup,
    train: TrainStep,
    alone: PipelineRate,
    measured: ModelRun,
    **fields: Any,
) -> BenchReport:
    """A BenchReport of what both kinds of run measure, with the fields that tell them apart;
    a step's note (no XLA) joins the notes, and the notes and advice follow from the whole.
    The device section says what ran: a model of the user's keeps its own precision and XLA."""
    note = getattr(train.step, "note", None)
    run = train.settings(measured.other_xla_ms, measured.compile_s)
    device = device_as_run(setup, run)
    report = BenchReport(
        environment=environment(setup),
        model=train.name,
        accumulate=options.accumulate,
        device=device,
        pipeline=alone,
        ceiling=measured.ceiling,
        end_to_end=measured.end_to_end,
        gpu_utilization=measured.monitor.utilization,
        gpu_note=measured.monitor.unavailable,
        seconds=options.seconds,
        run=run,
        **{**fields, "notes": (*fields.get("notes", ()), *([note] if note else []))},
    )
    report = replace(report, notes=(*notes_for(report), *report.notes))
    return replace(report, advice=advice_for(report))


def device_as_run(setup: DeviceSetup, run: StepSettings) -> DeviceSetup:
    """The device set-up with the precision and XLA the timed step ran with (a model of the
    user's keeps its own), and without the note of a precision it did not use: one truth per
    fact in the report."""
    if (run.policy, run.xla) == (setup.precision, setup.xla):
        return setup
    kept = tuple(n for n in setup.notes if not n.startswith(f"{setup.precision}:"))
    return replace(setup, precision=run.policy, xla=run.xla, notes=kept)


def traced_stages(
    options: BenchOptions, progress: PhaseProgress, dataset: Callable[[], Any]
) -> StageSettings | None:
    """The pipeline's stages as TensorFlow ran them, when the run records them (after every
    timed phase: tracing never changes what is measured)."""
    if not options.records_stages:
        return None
    with progress.phase("pipeline stages", "trace") as tick:
        stages = trace_stage_settings(dataset())
        tick(1)
    return stages


def environment(setup: DeviceSetup) -> dict[str, Any]:
    """Where the run ran: versions, host cores, the command line."""
    import os
    import platform
    import shlex
    import sys

    import tensorflow as tf

    from feedgpu import __version__

    return {
        "feedgpu": __version__,
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "host_cores": os.cpu_count() or 1,
        "platform": platform.platform(terse=True),
        "command": shlex.join([os.path.basename(sys.argv[0]), *sys.argv[1:]]),
        "strategy": type(setup.strategy).__name__,
    }


def first_shape(batch: Any) -> tuple[int, ...]:
    """The first feature's shape in a batch (images, or text's input_ids)."""
    import tensorflow as tf

    features = batch[0] if isinstance(batch, tuple) else batch
    first = features["input_ids"] if isinstance(features, dict) else features
    return tuple(int(d) for d in tf.shape(first).numpy())
