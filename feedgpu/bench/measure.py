"""`bench-input`: is the accelerator saturated, and if not, which input stage is to blame.

Three rates on the same data in one run: the pipeline alone, the model alone on resident
batches (the compute ceiling), and the two together, where each step's time blocked in `next()`
is the input wait. The verdict uses the TF Profiler's thresholds on the input-wait share of step
time: under 5% saturated, 5-20% moderately and 20% or more highly input-bound.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from feedgpu.bench.ablation import run_ablation
from feedgpu.bench.device import DeviceSetup, resolve_devices
from feedgpu.bench.models import build_workload
from feedgpu.bench.report import (
    SATURATED_SHARE,
    BenchReport,
    CapacityPlan,
    Compared,
    PipelineRate,
    StepRate,
)
from feedgpu.bench.rounds import PhaseProgress, measure_model, measure_pipeline
from feedgpu.bench.steps import batch_size_of, make_train_step, time_steps
from feedgpu.bench.user_data import (
    DATASET_NAME,
    describe,
    endless,
    label_count,
    vocab_count,
)
from feedgpu.bench.user_model import fit_model, is_user_model, load_user_model, make_model_step
from feedgpu.errors import UsageError
from feedgpu.format.manifest import read_manifest
from feedgpu.pipeline.build import build_pipeline
from feedgpu.pipeline.spec import PipelineSpec
from feedgpu.pipeline.stages import StageChanges

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchOptions:
    """How to measure.

    Attributes:
        split: the split to read.
        batch_size: global batch size (split over replicas).
        model: a built-in model size (small, medium or large), a saved Keras model's path
            (.keras), or a compiled keras.Model: measured with its own train step.
        training: measure the training pipeline (shuffle, augmentation).
        seconds: timed length of each phase (after warm-up), in ROUNDS rounds.
        max_seconds: cap on each phase's timed length when its MIN_STEPS steps take longer
            than `seconds` (default: 5 x seconds); the report says when it had to stop.
        accumulate: gradient accumulation micro-batches per step.
        ablation: "auto" (when input-bound), "always" or "never".
        ablation_seconds: timed length of each ablation variant.
        profile_dir: write a TensorBoard profiler trace of a window of steps here.
        profile_steps: steps in the profiled window.
        overrides: PipelineSpec fields to change from the automatic choices.
        stages: known delays to inject (measurement checks; see StageChanges).
        service_workers: tf.data service workers serving the pipeline (when the spec names a
            service), for the capacity plan's workers-needed estimate.
        quiet: no progress bars.
    """

    split: str = "train"
    batch_size: int = 32
    model: Any = "small"
    training: bool = True
    seconds: float = 10.0
    max_seconds: float | None = None
    accumulate: int = 1
    ablation: str = "auto"
    ablation_seconds: float = 3.0
    profile_dir: str | None = None
    profile_steps: int = 10
    overrides: dict[str, Any] = field(default_factory=dict)
    stages: StageChanges = field(default_factory=StageChanges)
    service_workers: int = 1
    quiet: bool = False

    def __post_init__(self) -> None:
        if self.ablation not in ("auto", "always", "never"):
            raise UsageError(f"ablation {self.ablation!r}: choose auto, always or never")
        if self.seconds <= 0 or self.ablation_seconds <= 0:
            raise UsageError("seconds and ablation_seconds must be positive")
        if is_user_model(self.model) and self.accumulate != 1:
            raise UsageError(
                "accumulate: your model trains with its own train step, which has no gradient "
                "accumulation; drop --accumulate"
            )
        if self.max_seconds is not None and self.max_seconds < self.seconds:
            raise UsageError("max_seconds must be at least seconds")
        if self.batch_size < 1 or self.accumulate < 1 or self.service_workers < 1:
            raise UsageError("batch_size, accumulate and service_workers must be at least 1")

    @property
    def cap_seconds(self) -> float:
        return self.max_seconds if self.max_seconds is not None else 5 * self.seconds


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
            the report puts the two pipelines side by side.
        setup: from `feedgpu.setup_devices()` (call it first in the program); by default the
            devices as they are now.
        spec: the pipeline to measure; by default PipelineSpec.for_dataset with the options.

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
    if dataset is None:
        assert data_dir is not None
        return _bench_feedgpu(data_dir, options, setup, spec, model, progress)
    refused = [name for name, given in _FEEDGPU_ONLY.items() if given(options)]
    if data_dir is None and (refused or spec is not None):
        raise UsageError(
            f"{', '.join(refused) or 'a spec'} applies to feedgpu's pipeline, not to your "
            "tf.data dataset: drop it, or give DATA too to compare the two"
        )
    yours = _bench_dataset(dataset, options, setup, model, progress)
    if data_dir is None:
        return yours
    ours = _bench_feedgpu(data_dir, options, setup, spec, model, progress)
    return replace(yours, compared=Compared.of(ours))


# Options that only a feedgpu pipeline can take, and how to tell they were given.
_FEEDGPU_ONLY: dict[str, Callable[[BenchOptions], bool]] = {
    "pipeline overrides (--image-size, --max-length, --text-mode, --service...)": lambda o: bool(
        o.overrides
    ),
    "--inject-delay": lambda o: bool(o.stages.skip or o.stages.delay_s),
    "--ablation always": lambda o: o.ablation == "always",
    "--split": lambda o: o.split != "train",
}


def _bench_feedgpu(
    data_dir: str,
    options: BenchOptions,
    setup: DeviceSetup,
    spec: PipelineSpec | None,
    model: Any,
    progress: PhaseProgress,
) -> BenchReport:
    manifest = read_manifest(data_dir)
    fit = fit_model(model, manifest.kind, manifest.pack_length) if model is not None else None
    if spec is None:
        overrides = dict(options.overrides)
        for name, wanted in (fit.overrides if fit else {}).items():
            if overrides.setdefault(name, wanted) != wanted:
                raise UsageError(
                    f"the model takes {name}={wanted}; {name}={overrides[name]} does not fit it "
                    "(drop the option: it is read from the model)"
                )
        spec = PipelineSpec.for_dataset(
            data_dir,
            options.split,
            batch_size=options.batch_size,
            training=options.training,
            **overrides,
        )
    # Static shapes for XLA: every batch full. Steady state: epochs run on inside the pipeline
    # (the spec saved at the end keeps the user's choice).
    asked = spec
    spec = spec.with_changes(drop_remainder=True, batch_size=options.batch_size, repeat=True)

    def dataset(variant: PipelineSpec, stages: StageChanges) -> Any:
        if not setup.distributed:  # no distribution layer: it would add a prefetch of its own
            return build_pipeline(variant, None, stages)

        def per_worker(context: Any) -> Any:
            size = context.get_per_replica_batch_size(options.batch_size)
            return build_pipeline(variant.with_changes(batch_size=size), context, stages)

        return setup.strategy.distribute_datasets_from_function(per_worker)

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
    step, name = _train_step(
        model,
        fit,
        spec.kind,
        options,
        setup,
        num_classes=len(manifest.label_names),
        image_size=spec.image_size,
        vocab_size=manifest.tokenizer.vocab_size if manifest.tokenizer else 30522,
        max_length=max(spec.max_length, manifest.pack_length or 0),
    )
    ceiling, end_to_end, monitor = measure_model(
        step, iter(data), setup, options.seconds, options.cap_seconds, progress
    )
    if options.profile_dir:
        _profile(step, iter(data), options.profile_dir, options.profile_steps)
    ablation = None
    if options.ablation == "always" or (
        options.ablation == "auto" and end_to_end.input_share >= SATURATED_SHARE
    ):
        split_bytes = manifest.split(spec.split).num_bytes
        ablation = run_ablation(spec, options.stages, rate, split_bytes)
    return _report(
        options,
        setup,
        step,
        name,
        alone,
        (ceiling, end_to_end, monitor),
        data_dir=data_dir,
        split=spec.split,
        kind=spec.kind,
        batch_size=options.batch_size,
        ablation=ablation,
        capacity=CapacityPlan.of(alone, ceiling, options.service_workers if spec.service else None),
        spec=(ablation.best_spec if ablation else spec).with_changes(repeat=asked.repeat),
        profile_dir=options.profile_dir,
    )


def _bench_dataset(
    dataset: Any, options: BenchOptions, setup: DeviceSetup, model: Any, progress: PhaseProgress
) -> BenchReport:
    """Your tf.data pipeline on the model: the three rates and the verdict (no ablation)."""
    shape = describe(dataset)
    if setup.distributed:
        dataset = setup.strategy.experimental_distribute_dataset(dataset)
    with progress.phase("pipeline alone", "batch") as tick:
        alone = measure_pipeline(endless(dataset), options.seconds, tick)
    batches = endless(dataset)
    first = [next(batches) for _ in range(4)]
    batches = itertools.chain(first, batches)
    fit = fit_model(model, shape.kind) if model is not None else None
    wanted = fit.overrides.get("image_size") if fit else None
    if wanted and shape.image_size and wanted != shape.image_size:
        raise UsageError(
            f"the model takes {wanted[0]}x{wanted[1]} images; {DATASET_NAME} gives "
            f"{shape.image_size[0]}x{shape.image_size[1]}"
        )
    if fit is None and shape.kind == "text" and "attention_mask" not in shape.features:
        raise UsageError(
            f"the built-in text model takes input_ids and attention_mask; {DATASET_NAME} "
            f"gives {', '.join(shape.features)}: pass your own model with --model"
        )
    sizes: dict[str, Any] = {}  # a built-in model's, from the first batches
    if fit is None:
        dims, text = _first_shape(first[0]), shape.kind == "text"
        sizes = {
            "num_classes": label_count(first) if shape.labelled or not text else 0,
            "image_size": (224, 224) if text else shape.image_size or (dims[1], dims[2]),
            "vocab_size": vocab_count(first) if text else 30522,
            "max_length": max(512, dims[1]) if text else 512,
        }
    step, name = _train_step(model, fit, shape.kind, options, setup, **sizes)
    measured = measure_model(step, batches, setup, options.seconds, options.cap_seconds, progress)
    return _report(
        options,
        setup,
        step,
        name,
        alone,
        measured,
        data_dir=DATASET_NAME,
        split="-",
        kind=shape.kind,
        batch_size=batch_size_of(first[0]),
        ablation=None,
        capacity=CapacityPlan.of(alone, measured[0], None),
        spec=None,
        profile_dir=None,
        notes=(
            "the ablation needs a feedgpu pipeline: skipped for your dataset (convert the data "
            "with feedgpu convert and give DATA too, to compare the two)",
        ),
    )


def _train_step(
    model: Any, fit: Any, kind: str, options: BenchOptions, setup: DeviceSetup, **shape: Any
) -> tuple[Any, str]:
    """The step to time and the model's name: a user's model with its own train step, else
    the built-in workload of options.model sized by `shape` (build_workload's arguments)."""
    if model is not None:
        return make_model_step(model, fit, setup), f"{model.name} (yours)"
    workload = build_workload(kind, options.model, setup, **shape)
    return make_train_step(workload, setup, options.accumulate), workload.name


def _report(
    options: BenchOptions,
    setup: DeviceSetup,
    step: Any,
    name: str,
    alone: PipelineRate,
    measured: tuple[StepRate, StepRate, Any],
    **fields: Any,
) -> BenchReport:
    """A BenchReport of what both kinds of run measure, with the fields that tell them apart;
    a step's note (no XLA) joins the notes."""
    ceiling, end_to_end, monitor = measured
    note = getattr(step, "note", None)
    return BenchReport(
        model=name,
        accumulate=options.accumulate,
        device=setup,
        pipeline=alone,
        ceiling=ceiling,
        end_to_end=end_to_end,
        gpu_utilization=monitor.utilization,
        gpu_note=monitor.unavailable,
        seconds=options.seconds,
        **{**fields, "notes": (*fields.get("notes", ()), *([note] if note else []))},
    )


def _first_shape(batch: Any) -> tuple[int, ...]:
    """The first feature's shape in a batch (images, or text's input_ids)."""
    import tensorflow as tf

    features = batch[0] if isinstance(batch, tuple) else batch
    first = features["input_ids"] if isinstance(features, dict) else features
    return tuple(int(d) for d in tf.shape(first).numpy())


def _profile(step: Any, batches: Iterator[Any], logdir: str, steps: int) -> None:
    """A TensorBoard profiler trace of `steps` training steps (after the timed phases, so the
    profiler's overhead never reaches the numbers)."""
    import tensorflow as tf

    def trace(index: int) -> Any:
        return tf.profiler.experimental.Trace("train", step_num=index, _r=1)

    tf.profiler.experimental.start(logdir)
    try:
        time_steps(step, batches, seconds=float("inf"), max_steps=steps, on_step=trace)
    finally:
        tf.profiler.experimental.stop()


def make_default_dataset(
    workdir: str, *, num_classes: int = 4, images_per_class: int = 128, quiet: bool = True
) -> str:
    """bench-input's built-in data: a generated sample image folder, converted; returns its path.

    Nothing can be downloaded, so the default is made here: photo-like JPEGs of typical sizes
    (320x240 to 640x480), which cost the host what real photos of those sizes cost.
    """
    from feedgpu.converters.images import convert_images
    from feedgpu.samples import write_sample_images

    src, out = os.path.join(workdir, "images"), os.path.join(workdir, "dataset")
    write_sample_images(src, num_classes=num_classes, images_per_class=images_per_class)
    convert_images(src, out, quiet=quiet)
    return out
