"""Your own tf.data pipeline in bench-input: its three rates and verdict on the model, and what
its batches look like, so feedgpu's pipeline can be built to the same shape beside it."""

from __future__ import annotations

import itertools
from typing import Any

from feedgpu.bench.device import DeviceSetup
from feedgpu.bench.options import BenchOptions
from feedgpu.bench.phases import first_shape, make_report, measure_step, traced_stages
from feedgpu.bench.report import BenchReport, CapacityPlan
from feedgpu.bench.rounds import PhaseProgress, measure_pipeline
from feedgpu.bench.steps import batch_size_of
from feedgpu.bench.train_step import TrainStep, train_step_for
from feedgpu.bench.user_data import (
    DATASET_NAME,
    DatasetShape,
    describe,
    endless,
    label_count,
    vocab_count,
)
from feedgpu.bench.user_model import fit_model
from feedgpu.errors import UsageError


def bench_yours(
    dataset: Any,
    options: BenchOptions,
    setup: DeviceSetup,
    model: Any,
    progress: PhaseProgress,
    data_dir: str | None,
) -> tuple[BenchReport, TrainStep, DatasetShape]:
    """Your tf.data pipeline on the model: the three rates and the verdict (no ablation)."""
    shape = describe(dataset)
    if setup.distributed:
        # Endless before it is distributed: under several workers, a dataset of known end
        # all-reduces at every batch, and each worker's own phases would wait on the others.
        dataset = setup.strategy.experimental_distribute_dataset(dataset.repeat())
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
    dims, text = first_shape(first[0]), shape.kind == "text"
    if fit is None:
        sizes = {
            "num_classes": label_count(first) if shape.labelled or not text else 0,
            "image_size": (224, 224) if text else shape.image_size or (dims[1], dims[2]),
            "vocab_size": vocab_count(first) if text else 30522,
            "max_length": max(512, dims[1]) if text else 512,
        }
    train = train_step_for(
        model, fit, shape.kind, options.model, options.accumulate, setup, **sizes
    )
    measured = measure_step(train, batches, setup, options, progress)
    batch = batch_size_of(first[0])
    ran_with: dict[str, Any] = {"batch_size": batch}
    if text:
        ran_with["max_length"] = shape.length or dims[1]
    else:
        ran_with |= {"image_size": shape.image_size or (dims[1], dims[2]), "dtype": shape.dtype}
    # your pipeline as TensorFlow ran it (after the timed phases)
    stages = traced_stages(options, progress, lambda: dataset)
    report = make_report(
        options,
        setup,
        train,
        alone,
        measured,
        data_dir=DATASET_NAME,
        split="-",
        kind=shape.kind,
        batch_size=batch,
        ablation=None,
        capacity=CapacityPlan.of(alone, measured.ceiling, None),
        spec=None,
        profile_dir=None,
        ran_with=ran_with,
        stages=stages,
        notes=()
        if data_dir
        else (
            "the ablation needs a feedgpu pipeline: skipped for your dataset (convert the data "
            "with feedgpu convert and give DATA too, to compare the two)",
        ),
    )
    return report, train, shape
