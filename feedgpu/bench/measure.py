"""`bench-input`: is the accelerator saturated, and if not, which input stage is to blame.

Three rates on the same data in one run: the pipeline alone, the model alone on resident
batches (the compute ceiling), and the two together, where each step's time blocked in `next()`
is the input wait. The verdict uses the TF Profiler's thresholds on the input-wait share of step
time: under 5% saturated, 5-20% moderately and 20% or more highly input-bound.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from feedgpu.bench.ablation import run_ablation
from feedgpu.bench.device import DeviceSetup, resolve_devices
from feedgpu.bench.gpu_monitor import GpuMonitor
from feedgpu.bench.models import build_workload
from feedgpu.bench.report import (
    SATURATED_SHARE,
    BenchReport,
    CapacityPlan,
    PipelineRate,
    StepRate,
)
from feedgpu.bench.steps import batch_size_of, make_train_step, time_steps
from feedgpu.errors import UsageError
from feedgpu.format.manifest import read_manifest
from feedgpu.pipeline.build import build_pipeline
from feedgpu.pipeline.spec import PipelineSpec
from feedgpu.pipeline.stages import StageChanges
from feedgpu.progress import progress_bar

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchOptions:
    """How to measure.

    Attributes:
        split: the split to read.
        batch_size: global batch size (split over replicas).
        model: synthetic model size: small, medium or large.
        training: measure the training pipeline (shuffle, augmentation).
        seconds: timed length of each phase (after warm-up).
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
    model: str = "small"
    training: bool = True
    seconds: float = 10.0
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
        if self.batch_size < 1 or self.accumulate < 1 or self.service_workers < 1:
            raise UsageError("batch_size, accumulate and service_workers must be at least 1")


class _Progress:
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
    """Drain batches for `seconds` after a warm-up of a fifth of that; nothing consumes them."""
    t0 = time.perf_counter()
    next(batches)
    first = time.perf_counter() - t0
    warm_until = time.perf_counter() + max(0.5, seconds / 5)
    while time.perf_counter() < warm_until:
        next(batches)
    cpu0, start = time.process_time(), time.perf_counter()
    examples = count = 0
    while time.perf_counter() - start < seconds:
        examples += batch_size_of(next(batches))
        count += 1
        if progress:
            progress(1)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu0
    return PipelineRate(
        first_batch_s=first,
        examples_per_s=examples / elapsed,
        batches_per_s=count / elapsed,
        host_cpu_ms_per_example=1000 * cpu / max(examples, 1),
        num_batches=count,
    )


def bench_input(
    data_dir: str,
    options: BenchOptions | None = None,
    *,
    setup: DeviceSetup | None = None,
    spec: PipelineSpec | None = None,
) -> BenchReport:
    """Measure the pipeline, the compute ceiling and the two together; judge and explain.

    Args:
        setup: from `feedgpu.setup_devices()` (call it first in the program); by default the
            devices as they are now.
        spec: the pipeline to measure; by default PipelineSpec.for_dataset with the options.

    Raises:
        DatasetError: data_dir is not a feedgpu dataset or lacks the split.
        UsageError: bad options.
    """
    import tensorflow as tf

    options = options or BenchOptions()
    setup = setup or resolve_devices()
    if spec is None:
        spec = PipelineSpec.for_dataset(
            data_dir,
            options.split,
            batch_size=options.batch_size,
            training=options.training,
            **options.overrides,
        )
    manifest = read_manifest(data_dir)
    replicas = setup.num_replicas
    if options.batch_size % replicas:
        raise UsageError(f"batch size {options.batch_size} does not split over {replicas} replicas")
    per_replica = options.batch_size // replicas
    if per_replica % options.accumulate:
        raise UsageError(
            f"batch of {per_replica} per replica does not split into "
            f"{options.accumulate} equal micro-batches (--accumulate)"
        )
    # Static shapes for XLA: every batch full. Steady state: epochs run on inside the pipeline
    # (the spec saved at the end keeps the user's choice).
    asked = spec
    spec = spec.with_changes(drop_remainder=True, batch_size=options.batch_size, repeat=True)
    progress = _Progress(options.quiet)

    def dataset(variant: PipelineSpec, stages: StageChanges) -> Any:
        if not setup.distributed:  # no distribution layer: it would add a prefetch of its own
            return build_pipeline(variant, None, stages)

        def per_worker(context: Any) -> Any:
            size = context.get_per_replica_batch_size(options.batch_size)
            return build_pipeline(variant.with_changes(batch_size=size), context, stages)

        return setup.strategy.distribute_datasets_from_function(per_worker)

    variants = itertools.count(1)

    def rate(variant: PipelineSpec, stages: StageChanges) -> float:
        with progress.phase(f"ablation {next(variants)}", "batch") as tick:
            batches = iter(dataset(variant, stages))
            return measure_pipeline(batches, options.ablation_seconds, tick).examples_per_s

    data = dataset(spec, options.stages)
    with progress.phase("pipeline alone", "batch") as tick:
        alone = measure_pipeline(iter(data), options.seconds, tick)
    if alone.num_batches == 0:
        raise UsageError("the pipeline gave no full batch in the time allowed: lower --batch-size")

    workload = build_workload(
        spec.kind,
        options.model,
        setup,
        num_classes=len(manifest.label_names),
        image_size=spec.image_size,
        vocab_size=manifest.tokenizer.vocab_size if manifest.tokenizer else 30522,
        max_length=max(spec.max_length, manifest.pack_length or 0),
    )
    step = make_train_step(workload, setup, options.accumulate)

    # Resident batches: a few distinct ones, so bucketed text shows each shape it will meet.
    source = iter(data)
    resident = [next(source) for _ in range(8)]
    if setup.device_type == "GPU" and not setup.distributed:
        with tf.device("/gpu:0"):
            resident = [tf.nest.map_structure(tf.identity, b) for b in resident]
    with progress.phase("compute ceiling") as tick:
        ceiling = time_steps(
            step, itertools.cycle(resident), seconds=options.seconds, progress=tick
        )
    gpu = setup.device_type == "GPU"
    with GpuMonitor(enabled=gpu) as monitor, progress.phase("end to end") as tick:
        together = time_steps(step, iter(data), seconds=options.seconds, progress=tick)
    if options.profile_dir:
        _profile(step, iter(data), options.profile_dir, options.profile_steps)

    end_to_end = StepRate.from_times(together)
    ablation = None
    if options.ablation == "always" or (
        options.ablation == "auto" and end_to_end.input_share >= SATURATED_SHARE
    ):
        split_bytes = manifest.split(spec.split).num_bytes
        ablation = run_ablation(spec, options.stages, rate, split_bytes)
    cores = os.cpu_count() or 1
    needed = ceiling.examples_per_s * alone.host_cpu_ms_per_example / 1000
    return BenchReport(
        data_dir=data_dir,
        split=spec.split,
        kind=spec.kind,
        model=workload.name,
        batch_size=options.batch_size,
        accumulate=options.accumulate,
        device=setup,
        pipeline=alone,
        ceiling=StepRate.from_times(ceiling),
        end_to_end=end_to_end,
        gpu_utilization=monitor.utilization,
        gpu_note=monitor.unavailable,
        ablation=ablation,
        capacity=CapacityPlan(
            host_cpu_ms_per_example=alone.host_cpu_ms_per_example,
            cores_needed=needed,
            host_cores=cores,
            hosts_needed=max(1, math.ceil(needed / cores)),
            service_workers=options.service_workers if spec.service else None,
            service_workers_needed=max(
                1,
                math.ceil(ceiling.examples_per_s * options.service_workers / alone.examples_per_s),
            )
            if spec.service
            else None,
        ),
        spec=(ablation.best_spec if ablation else spec).with_changes(repeat=asked.repeat),
        profile_dir=options.profile_dir,
        seconds=options.seconds,
    )


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
