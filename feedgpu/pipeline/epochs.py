"""How many batches an epoch holds, from the manifest's exact counts, so Keras knows the epoch
(a progress bar with a total; no "ran out of data" warning when an epoch ends).

Images: the examples this pipeline reads, divided by the batch size. Text is batched a group of
blocks at a time (see `text.text_batches`): all blocks are full but the last, and where training's
block shuffle puts that one changes how many batches its group yields by at most one, so the
epoch is cut to the smaller of the two possible counts (at most one batch a epoch, a different
one each epoch). Unknown (None) when records may be skipped (`ignore_errors`), epochs repeat, or
tf.data service workers share the files out among themselves.

And the epochs themselves: each epoch's key, the plan of epochs a resumable iterator runs
(`epoch_plan`), and the numbering that keys every element's random draws (`numbered`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from feedgpu.errors import UsageError
from feedgpu.format.manifest import Manifest
from feedgpu.pipeline.readers import BLOCK, keyed_shuffle

if TYPE_CHECKING:
    from feedgpu.pipeline.spec import PipelineSpec

# Batches per bucketing window: more sorts closer to the bucket bounds, and holds more in memory.
BUCKET_WINDOW = 16


def examples_read(spec: PipelineSpec, manifest: Manifest, input_context: Any = None) -> int:
    """Examples in the shard files this pipeline reads (its host's share, with a context)."""
    shards = manifest.split(spec.split, spec.data_dir).shards
    if input_context is not None and input_context.num_input_pipelines > 1:
        shards = shards[input_context.input_pipeline_id :: input_context.num_input_pipelines]
    return sum(s.num_examples for s in shards)


def _batches(examples: int, size: int, drop_remainder: bool) -> int:
    return examples // size if drop_remainder else -(-examples // size)


def batches_per_epoch(
    spec: PipelineSpec, manifest: Manifest, input_context: Any = None
) -> int | None:
    """Batches one iteration of the pipeline yields for sure (None: not known in advance, or
    endless).

    Raises:
        UsageError: with drop_remainder, the split makes no full batch (an epoch would be empty
            and `model.fit` would train on nothing without a word).
    """
    return None if spec.repeat else epoch_batches(spec, manifest, input_context)


def epoch_batches(spec: PipelineSpec, manifest: Manifest, input_context: Any = None) -> int | None:
    """Batches one epoch yields for sure, repeated or not (None: not known in advance).

    Raises:
        UsageError: as batches_per_epoch.
    """
    if spec.ignore_errors or spec.service:  # service workers split the files
        return None
    n = examples_read(spec, manifest, input_context)
    size = spec.batch_size
    if spec.kind == "image":
        count = _batches(n, size, spec.drop_remainder)
    else:
        per_group = blocks_per_group(spec)
        blocks = -(-n // BLOCK)
        last_block = n - (blocks - 1) * BLOCK if blocks else 0
        groups = -(-blocks // per_group)
        last_group = blocks - (groups - 1) * per_group  # blocks in the last group

        def total(partial_in_last_group: bool) -> int:
            sizes = [per_group * BLOCK] * (groups - 1) + [last_group * BLOCK]
            at = groups - 1 if partial_in_last_group or groups == 1 else 0
            sizes[at] -= BLOCK - last_block
            return sum(_batches(g, size, spec.drop_remainder) for g in sizes)

        count = total(True)  # unshuffled blocks: the partial one comes last
        if spec.shuffle_buffer:  # shuffled blocks: wherever it lands, at least this many
            count = min(count, total(False))
    if count == 0 and n:
        raise UsageError(
            f"batch_size {size} with drop_remainder: the {spec.split!r} split gives this "
            f"pipeline {n} examples, not one full batch; lower batch_size or set "
            "drop_remainder=False"
        )
    return count


def blocks_per_group(spec: PipelineSpec) -> int:
    """Blocks gathered into one group: about shuffle_buffer examples, and at least the
    BUCKET_WINDOW batches that bucketing sorts within."""
    return -(-max(spec.shuffle_buffer, spec.batch_size * BUCKET_WINDOW) // BLOCK)


# Epoch keys stay below 2**62, so a key plus an element's index within its epoch never overflows.
_KEY_BITS = (1 << 62) - 1


def epoch_key(seed: int, epoch: Any) -> Any:
    """An epoch's key: every random draw of the epoch is keyed by it (file order, shuffle, and
    with the element's index, each augmentation), so any epoch can be replayed from its number."""
    import tensorflow as tf

    pair = tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)])
    bits = tf.random.stateless_uniform([], pair, minval=None, maxval=None, dtype=tf.int64)
    return tf.bitwise.bitwise_and(bits, _KEY_BITS)


def epoch_plan(spec: PipelineSpec, seed: int, position: Any) -> Any:
    """The epochs an iterator of a resumable pipeline runs: (key, what to skip of it) pairs,
    from where the position is when the iterator starts (`InputPosition.start`), and when
    repeating on through the epochs after it; each epoch's key comes from its number alone.

    None without a position: such a pipeline runs its one epoch graph at the top level under
    a fixed key, its shuffles reseeded by tf.data on each iteration (reproducible per seed). An
    epoch plan costs each new iterator ~70-80 ms more on 2 cores (its epoch graph is
    instantiated inside `flat_map`), and tf.data service needs the shard files as the
    pipeline's first dataset (its workers share them out).
    """
    import tensorflow as tf

    if position is None:
        return None

    def from_position(_: Any) -> Any:
        first, skip = position.start()
        last = tf.int64.max if spec.repeat else first + 1
        return tf.data.Dataset.range(first, last).map(
            lambda e: (epoch_key(seed, e), tf.where(e == first, skip, 0))
        )

    return tf.data.Dataset.from_tensors(0).flat_map(from_position)


def run_epochs(plan: Any, epoch: Any, spec: PipelineSpec, seed: int) -> Any:
    """The elements of the plan's epochs, `epoch(key, skip)` for each (see epoch_plan)."""
    import tensorflow as tf

    if plan is None:  # one epoch graph, reshuffled on each iteration and repetition
        ds = epoch(epoch_key(seed, tf.constant(0, tf.int64)), tf.constant(0, tf.int64))
        return ds.repeat() if spec.repeat else ds
    return plan.flat_map(epoch)


def numbered(ds: Any, key: Any, keyed: bool, seed: int) -> Any:
    """(index, element) pairs; the index keys the element's random draws. Keyed (an epoch plan):
    its place in the epoch plus the epoch's key, the same whenever the epoch is replayed.
    Otherwise a fresh number per element on each iteration (reproducible per seed), so epochs
    differ even where nothing reorders the elements."""
    import tensorflow as tf

    if keyed:
        return ds.enumerate(start=key)
    draws = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
    return tf.data.Dataset.zip((draws, ds))


def example_epoch(source: Any, spec: PipelineSpec, keyed: bool, seed: int) -> Any:
    """One epoch of single examples from its key: shuffled by the key, each paired with its
    index (key + place in the epoch, which keys its augmentation), the first `skip` examples
    left out before anything is decoded. Nothing cuts the epoch short: the cache under it
    must see its end, or tf.data throws the cache away."""

    def epoch(key: Any, skip: Any) -> Any:
        ds = source(key)
        if spec.shuffle_buffer:
            ds = keyed_shuffle(ds, spec.shuffle_buffer, key)
        ds = numbered(ds, key, keyed, seed)
        return ds.skip(skip) if keyed else ds

    return epoch
