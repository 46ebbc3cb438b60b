"""`bench-input`: is the accelerator saturated, and if not, which input stage is to blame.

Three rates on the same data in one run: the pipeline alone, the model alone on resident
batches (the compute ceiling), and the two together, where each step's time blocked in `next()`
is the input wait. The verdict uses the TF Profiler's thresholds on the input-wait share of step
time: under 5% saturated, 5-20% moderately and 20% or more highly input-bound.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from feedgpu.bench.ablation import run_ablation
from feedgpu.bench.bench_spec import bench_spec
from feedgpu.bench.device import DeviceSetup, resolve_devices, workers_agree
from feedgpu.bench.options import BenchOptions
from feedgpu.bench.phases import make_report, measure_step, traced_stages
from feedgpu.bench.records import PipelineRate, StepRate
from feedgpu.bench.report import SATURATED_SHARE, BenchReport, CapacityPlan, Compared
from feedgpu.bench.rounds import PhaseProgress, measure_pipeline, profile_steps
from feedgpu.bench.train_step import TrainStep, train_step_for
from feedgpu.bench.user_data import DatasetShape
from feedgpu.bench.user_model import ModelFit, fit_model, is_user_model, load_user_model
from feedgpu.bench.yours import bench_yours
from feedgpu.errors import UsageError
from feedgpu.format.manifest import read_manifest
from feedgpu.pipeline.build import build_pipeline
from feedgpu.pipeline.measure_hooks import StageChanges
from feedgpu.pipeline.spec import PipelineSpec

__all__ = ["BenchOptions", "bench_input"]

logger = logging.getLogger(__name__)


def bench_input(
    data_dir: str | None = None,
    options: BenchOptions | None = None,
    *,
    dataset: Any = None,
    setup: DeviceSetup | None = None,
    spec: PipelineSpec | None = None,
) -> BenchReport:
    """Measure the pipeline, the compute ceiling and the two together; judge and explain.

    Args:
        data_dir: a dataset written by `feedgpu convert`, read by feedgpu's pipeline.
        dataset: instead, or as well, your own `tf.data.Dataset` of batches: measured on the
            same model (the ablation needs a feedgpu spec and is skipped); with data_dir too,
            feedgpu's pipeline is built to your batches' shape (image size, dtype, batch size,
            text length) and both are measured against one compute ceiling.
        setup: from `feedgpu.setup_devices()` (call it first in the program); by default the
            devices as they are now.
        spec: the pipeline to measure (a saved one); by default one made for the dataset.
            Either way options.overrides, the model's input shape and your dataset's batches
            are applied to it, and what cannot apply is refused (bench_spec).

    Raises:
        DatasetError: data_dir is not a feedgpu dataset or lacks the split.
        UsageError: bad options, or a model that does not fit the data.
    """
    options = options or BenchOptions()
    setup = setup or resolve_devices()
    if data_dir is None and dataset is None:
        raise UsageError("give a dataset written by feedgpu convert (DATA) or a tf.data dataset")
    replicas = setup.num_replicas
    if options.batch_size % replicas:
        raise UsageError(f"batch size {options.batch_size} does not split over {replicas} replicas")
    if (options.batch_size // replicas) % options.accumulate:
        raise UsageError(
            f"batch of {options.batch_size // replicas} per replica does not split into "
            f"{options.accumulate} equal micro-batches (--accumulate)"
        )
    model = load_user_model(options.model, setup) if is_user_model(options.model) else None
    progress = PhaseProgress(options.quiet)
    fit = _fit(model, read_manifest(data_dir)) if data_dir is not None else None
    if dataset is None:
        assert data_dir is not None
        resolved = _resolve(data_dir, options, spec, fit, None, options.batch_size)
        return _reported(_bench_feedgpu(resolved, options, setup, model, fit, progress), options)
    refused = [name for name, given in _FEEDGPU_ONLY.items() if given(options)]
    if data_dir is None and (refused or spec is not None):
        raise UsageError(
            f"{', '.join(refused) or 'a spec'} applies to feedgpu's pipeline, not to your "
            "tf.data dataset: drop it, or give DATA too to compare the two"
        )
    yours, train, shape = bench_yours(dataset, options, setup, model, progress, data_dir)
    if data_dir is None:
        return _reported(yours, options)
    # feedgpu's pipeline built to the user's batches, on the same step, against the same ceiling
    resolved = _resolve(data_dir, options, spec, fit, shape, yours.batch_size)
    ours = _bench_feedgpu(
        resolved,
        replace(options, ablation="never", batch_size=yours.batch_size),
        setup,
        model,
        fit,
        progress,
        shared=(train, yours.ceiling),
    )
    return _reported(replace(yours, compared=Compared.of(ours)), options)


def _distributed(spec: PipelineSpec, stages: StageChanges, setup: DeviceSetup) -> Any:
    """The pipeline, per replica under a strategy (each worker builds its own share)."""
    if not setup.distributed:  # no distribution layer: it would add a prefetch of its own
        return build_pipeline(spec, None, stages)
    if spec.service and workers_agree(setup) is not None:
        # Under several workers a distributed dataset of unknown length all-reduces at every
        # batch, and each worker's own phases (the pipeline alone) would wait on the others.
        raise UsageError(
            "--service with --strategy multi_worker: measure the service from one worker "
            "(without --strategy), its capacity plan says how many workers it needs"
        )

    def per_worker(context: Any) -> Any:  # build_pipeline divides the batch among replicas
        return build_pipeline(spec, context, stages)

    return setup.strategy.distribute_datasets_from_function(per_worker)


def _reported(report: BenchReport, options: BenchOptions) -> BenchReport:
    """The report, written to options.report first when one is asked for (after every
    measurement: drawing it changes nothing measured)."""
    if options.report:
        from feedgpu.report import write_report

        write_report(options.report, [report.to_json()])
    return report


def _fit(model: Any, manifest: Any) -> ModelFit | None:
    if model is None:
        return None
    vocab = manifest.tokenizer.vocab_size if manifest.tokenizer else None
    return fit_model(model, manifest.kind, manifest.pack_length, vocab)


def _resolve(
    data_dir: str,
    options: BenchOptions,
    spec: PipelineSpec | None,
    fit: ModelFit | None,
    shape: DatasetShape | None,
    batch_size: int,
) -> PipelineSpec:
    """bench_spec with the run's options."""
    return bench_spec(
        data_dir,
        split=options.split,
        batch_size=batch_size,
        training=options.training,
        overrides=options.overrides,
        spec=spec,
        fit=fit,
        yours=shape,
    )


# Options that only a feedgpu pipeline can take, and how to tell they were given.
_FEEDGPU_ONLY: dict[str, Callable[[BenchOptions], bool]] = {
    "pipeline overrides (--image-size, --max-length, --text-mode, --service...)": lambda o: bool(
        o.overrides
    ),
    "--inject-delay": lambda o: bool(o.stages.skip or o.stages.delay_s),
    "--ablation always": lambda o: o.ablation == "always",
    "--split": lambda o: o.split != "train",
}


def _ran_with(spec: PipelineSpec, pack_length: int | None) -> dict[str, Any]:
    """What the batches were, as a side by side compares them."""
    if spec.kind == "image":
        return {"image_size": spec.image_size, "dtype": spec.dtype, "batch_size": spec.batch_size}
    return {"max_length": pack_length or spec.max_length, "batch_size": spec.batch_size}


def _bench_feedgpu(
    asked: PipelineSpec,
    options: BenchOptions,
    setup: DeviceSetup,
    model: Any,
    fit: ModelFit | None,
    progress: PhaseProgress,
    shared: tuple[TrainStep, StepRate] | None = None,
) -> BenchReport:
    """feedgpu's pipeline on the model; with `shared`, on that step against that ceiling."""
    manifest = read_manifest(asked.data_dir)
    # Static shapes for XLA: every batch full. Steady state: epochs run on inside the pipeline
    # (the spec saved at the end keeps the user's choice).
    spec = asked.with_changes(drop_remainder=True, repeat=True)

    def dataset(variant: PipelineSpec, stages: StageChanges) -> Any:
        return _distributed(variant, stages, setup)

    variants = itertools.count(1)

    def rate(variant: PipelineSpec, stages: StageChanges) -> PipelineRate:
        with progress.phase(f"ablation {next(variants)}", "batch") as tick:
            batches = iter(dataset(variant, stages))
            return measure_pipeline(batches, options.ablation_seconds, tick)

    data = dataset(spec, options.stages)
    with progress.phase("pipeline alone", "batch") as tick:
        alone = measure_pipeline(iter(data), options.seconds, tick)
    if alone.num_batches == 0:
        raise UsageError("the pipeline gave no full batch in the time allowed: lower --batch-size")
    train = (
        shared[0]
        if shared
        else train_step_for(
            model,
            fit,
            spec.kind,
            options.model,
            options.accumulate,
            setup,
            num_classes=len(manifest.label_names),
            image_size=spec.image_size,
            vocab_size=manifest.tokenizer.vocab_size if manifest.tokenizer else 30522,
            max_length=max(spec.max_length, manifest.pack_length or 0),
        )
    )
    measured = measure_step(train, iter(data), setup, options, progress, shared)
    if options.profile_dir:
        profile_steps(train.step, iter(data), options.profile_dir, options.profile_steps, setup)
    ablation = None
    if options.ablation == "always" or (
        options.ablation == "auto" and measured.end_to_end.input_share >= SATURATED_SHARE
    ):
        split_bytes = manifest.split(spec.split).num_bytes
        sides = [(manifest.statistics.get(k) or {}).get("max") for k in ("width", "height")]
        stored = manifest.options.get("max_size") or max(filter(None, sides), default=None)
        ablation = run_ablation(spec, options.stages, rate, split_bytes, stored)
    shown = ablation.best_spec if ablation else spec  # the spec the report shows
    # A compared run's report is only a line beside the user's: nothing to trace for it. The
    # shown spec's pipeline, built anew (an empty cache: the stages under it run and are traced).
    stages = (
        None if shared else traced_stages(options, progress, lambda: dataset(shown, options.stages))
    )
    return make_report(
        options,
        setup,
        train,
        alone,
        measured,
        data_dir=spec.data_dir,
        split=spec.split,
        kind=spec.kind,
        batch_size=spec.batch_size,
        ablation=ablation,
        capacity=CapacityPlan.of(
            alone, measured.ceiling, options.service_workers if spec.service else None
        ),
        spec=shown.with_changes(repeat=asked.repeat),
        profile_dir=options.profile_dir,
        ran_with=_ran_with(spec, manifest.pack_length),
        stages=stages,
    )
