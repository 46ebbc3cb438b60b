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

Augmentation and text groups are keyed by the seed and the element's place in its epoch. With
an `InputPosition` every draw is (file order and shuffles too, by the epoch's number) and an
iterator runs the epochs of an `epochs.epoch_plan`, starting at the batch the position names
and skipping the records before it undecoded (exact resume).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from feedgpu.errors import UsageError
from feedgpu.pipeline.epochs import (
    epoch_batches,
    epoch_plan,
    example_epoch,
    host_batches,
    host_cut,
    run_epochs,
)
from feedgpu.pipeline.images import image_batches
from feedgpu.pipeline.measure_hooks import StageChanges, sleep_elements
from feedgpu.pipeline.readers import epoch_source
from feedgpu.pipeline.service_watch import ServiceWatch, watch_for
from feedgpu.pipeline.spec import PipelineSpec
from feedgpu.pipeline.split_view import SplitView, per_replica, view_split

if TYPE_CHECKING:
    from feedgpu.pipeline.position import InputPosition

logger = logging.getLogger(__name__)


def build_pipeline(
    spec: PipelineSpec,
    input_context: Any = None,
    stages: StageChanges | None = None,
    position: InputPosition | None = None,
) -> Any:
    """The batched, prefetched `tf.data.Dataset` a spec describes.

    Images give (image [B, H, W, 3] of spec.dtype, label [B]); text gives ({"input_ids",
    "attention_mask", ...}, label) or just the dict for unlabelled text. Works as is with
    `model.fit`, and with `strategy.distribute_datasets_from_function` through input_context.
    With a `position` (made for this spec and input_context), each iterator starts at the
    batch the position names, and the batches are exactly those an uninterrupted run with the
    same seed sees there; the dataset's length is then left unknown (an iterator may start
    mid-epoch). `stages` is for measurement only (see StageChanges).

    Raises:
        UsageError: the position was made for another spec, dataset or input context, or the
            spec's kind is not the dataset's.
        DatasetError: as `split_view.view_split`.
    """
    import tensorflow as tf

    from feedgpu.pipeline.text import text_batches, text_columns

    spec = per_replica(spec, input_context)
    view = view_split(spec, input_context)  # the manifest, read once for what follows
    stages = stages or StageChanges()
    if spec.service and stages.delay_s:
        raise UsageError(
            "injected delays run in this process and cannot travel to tf.data service "
            "workers; measure them without a service"
        )
    if position is not None:
        position.check(spec, view)
    per_epoch = None if stages.skip else epoch_batches(spec, view)
    if per_epoch is not None and view.host[0] > 1 and (spec.kind == "text" or not spec.repeat):
        _say_unequal_shares(spec, view, per_epoch)
    # No seed: a fresh one, so unseeded runs still differ from each other.
    seed = spec.seed if spec.seed is not None else random.SystemRandom().getrandbits(62)
    plan = epoch_plan(spec, seed, position)
    image = spec.kind == "image"  # text stays in blocks until batched (see text_batches)
    columns = None if image else text_columns(spec, view)
    source = epoch_source(spec, view, stages, seed, image, plan is not None, columns)
    if image:
        cut = host_cut(spec, view, per_epoch)
        ds = run_epochs(plan, example_epoch(source, spec, plan is not None, seed, cut), spec, seed)
        ds = image_batches(ds, spec, stages, seed)
    else:
        ds = text_batches(plan, source, spec, view, seed, per_epoch)
    count = None if spec.repeat or position is not None else per_epoch
    if count is not None:  # Keras then shows the epoch's length and ends it without a warning
        ds = ds.apply(tf.data.experimental.assert_cardinality(count))
    if stages.delay("batch"):
        ds = ds.apply(sleep_elements(stages.delay("batch"), background=True))
    if spec.service:
        if not spec.repeat:
            logger.warning(
                "tf.data service with epochs that end: a worker that dies leaves its task in "
                "the job, and the epoch waits for it until a worker comes back at the same "
                "address; repeat=True (with steps_per_epoch) trains on through a lost worker"
            )
        ds = ds.apply(
            tf.data.experimental.service.distribute(
                processing_mode=spec.service_mode, service=spec.service, job_name=None
            )
        )
        watch = watch_for(spec.service)
        ds = ds.map(_beats(watch))  # a stall says which worker stopped
        watch.track(ds)
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
        ds = ds.apply(sleep_elements(stages.delay("stall"), background=False))
        # tf.data would otherwise add a prefetch after this last, synchronous stage and hide it.
        stall = tf.data.Options()
        stall.experimental_optimization.inject_prefetch = False
        ds = ds.with_options(stall)
    return ds


_SAID: set[tuple[str, int, int]] = set()  # (dataset, host, batches): each said once


def _say_unequal_shares(spec: PipelineSpec, view: SplitView, per_epoch: int) -> None:
    """Warn, once, when this host's share yields more batches than every host's common epoch:
    whole shard files of blocks of documents shared out unevenly (more shards even them out),
    or a share one example over a batch boundary (then only that batch is left out)."""
    own = host_batches(spec, view.num_examples)
    key = (view.dataset_fingerprint, view.host[1], per_epoch)
    if own <= per_epoch or key in _SAID:
        return
    _SAID.add(key)
    hosts, me = view.host
    fix = (
        f"re-convert with --num-shards a multiple of {hosts} for equal shares"
        if view.schema.blocks
        else "the split's examples do not divide evenly among the hosts' batches"
    )
    logger.warning(
        "input pipeline %d of %d reads %d examples, the smallest share %d: every host's epoch "
        "is cut to %d batches, leaving %d of its batches out an epoch; %s",
        me,
        hosts,
        view.num_examples,
        min(view.host_examples),
        per_epoch,
        own - per_epoch,
        fix,
    )


def _beats(watch: ServiceWatch) -> Callable[..., Any]:
    """A map that passes each batch on unchanged and counts it as delivered (`beat`)."""
    import tensorflow as tf

    def beat() -> int:
        watch.beat()
        return 0

    def passed(*element: Any) -> Any:
        with tf.control_dependencies([tf.py_function(beat, [], tf.int64)]):
            element = tf.nest.map_structure(tf.identity, element)
        return element if len(element) > 1 else element[0]

    return passed
