"""`build_pipeline`: the batched, prefetched tf.data pipeline a `PipelineSpec` describes.

The order of stages, and why (each is a classic way to starve an accelerator when wrong):
list shard files (shuffled per epoch when training: cheap, and it decorrelates shards) ->
shard by `tf.distribute.InputContext` (before anything expensive, so hosts read disjoint files) ->
parallel interleave of TFRecord readers (I/O from several files at once), handing over blocks
of records -> one vectorised parse per block -> cache (before random work, so augmentation
still differs per epoch) -> images: shuffle, parallel map (decode-and-crop, augment), batch;
text: stays in blocks, shuffled, bucketed and padded a group of blocks at a time (see
`text.text_batches`) -> `drop_remainder` when training so XLA sees static shapes ->
prefetch (to the GPU when there is one). AUTOTUNE parallelism throughout.
"""

from __future__ import annotations

from typing import Any

from feedgpu.errors import UsageError
from feedgpu.format.manifest import read_manifest
from feedgpu.pipeline.epochs import batches_per_epoch
from feedgpu.pipeline.images import image_batches
from feedgpu.pipeline.readers import cached, read_blocks, read_examples
from feedgpu.pipeline.spec import PipelineSpec
from feedgpu.pipeline.stages import StageChanges, sleep_elements


def build_pipeline(
    spec: PipelineSpec, input_context: Any = None, stages: StageChanges | None = None
) -> Any:
    """The batched, prefetched `tf.data.Dataset` a spec describes.

    Images give (image [B, H, W, 3] of spec.dtype, label [B]); text gives ({"input_ids",
    "attention_mask", ...}, label) or just the dict for unlabelled text. Works as is with
    `model.fit`, and with `strategy.distribute_datasets_from_function` through input_context.
    `stages` is for measurement only (see StageChanges).
    """
    import tensorflow as tf

    from feedgpu.pipeline.text import text_batches

    manifest = read_manifest(spec.data_dir)
    if spec.kind != manifest.kind:
        raise UsageError(
            f"kind={spec.kind!r}: {spec.data_dir} holds {manifest.kind} examples; "
            f"use kind={manifest.kind!r} (PipelineSpec.for_dataset sets it)"
        )
    stages = stages or StageChanges()
    if spec.kind == "image":
        ds = image_batches(read_examples(spec, manifest, input_context, stages), spec, stages)
    else:  # text stays in blocks until it is batched: per-example stages are what cost here
        ds = cached(read_blocks(spec, manifest, input_context, stages), spec)
        ds = text_batches(ds, spec, manifest.labelled, manifest.pack_length)
    count = None if stages.skip else batches_per_epoch(spec, manifest, input_context)
    if count is not None:  # Keras then shows the epoch's length and ends it without a warning
        ds = ds.take(count).apply(tf.data.experimental.assert_cardinality(count))
    if stages.delay("batch"):
        ds = ds.apply(sleep_elements(stages.delay("batch")))
    if spec.service:
        ds = ds.apply(
            tf.data.experimental.service.distribute(
                processing_mode=spec.service_mode, service=spec.service, job_name=None
            )
        )
    options = tf.data.Options()
    options.deterministic = spec.deterministic
    options.autotune.enabled = spec.autotune
    options.autotune.ram_budget = spec.ram_budget_bytes
    options.experimental_optimization.map_parallelization = True
    ds = ds.with_options(options)
    if spec.prefetch_to_device and tf.config.list_logical_devices("GPU"):
        # Overlap the host-to-device copy with the previous step (GPU only; a no-op on CPU).
        ds = ds.apply(tf.data.experimental.prefetch_to_device("/gpu:0"))
    else:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    if stages.delay("stall"):
        ds = ds.apply(sleep_elements(stages.delay("stall")))
        # tf.data would otherwise add a prefetch after this last, synchronous stage and hide it.
        stall = tf.data.Options()
        stall.experimental_optimization.inject_prefetch = False
        ds = ds.with_options(stall)
    return ds
