"""How many batches an epoch holds, from the manifest's exact counts, so Keras knows the epoch
(a progress bar with a total; no "ran out of data" warning when an epoch ends).

Images: the examples this pipeline reads, divided by the batch size. Text is batched a group of
blocks at a time (see `text.text_batches`): all blocks are full but the last, and where training's
block shuffle puts that one changes how many batches its group yields by at most one, so the
epoch is cut to the smaller of the two possible counts (at most one batch a epoch, a different
one each epoch). Unknown (None) when records may be skipped (`ignore_errors`), epochs repeat, or
tf.data service workers share the files out among themselves.

And the epochs themselves: the plan of epochs a resumable iterator runs (`epoch_plan`), each
epoch's examples (`example_epoch`); their random draws are keyed in `keyed`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from feedgpu.errors import UsageError
from feedgpu.pipeline.buckets import BLOCK, BUCKET_WINDOW
from feedgpu.pipeline.keyed import epoch_key, keyed_shuffle, numbered

if TYPE_CHECKING:
    from feedgpu.pipeline.spec import PipelineSpec
    from feedgpu.pipeline.split_view import SplitView


def _batches(examples: int, size: int, drop_remainder: bool) -> int:
    return examples // size if drop_remainder else -(-examples // size)


def epoch_batches(spec: PipelineSpec, view: SplitView) -> int | None:
    """Batches one epoch yields for sure, repeated or not (None: not known in advance).

    With several input pipelines, the fewest any of them yields: synchronous training needs
    every worker to run the same steps an epoch, so a larger share is cut to it (`host_cut`);
    with several replicas a pipeline, a whole number of steps (a batch each).

    Raises:
        UsageError: with drop_remainder, the split makes no full batch (an epoch would be empty
            and `model.fit` would train on nothing without a word).
    """
    if spec.ignore_errors or spec.service:  # service workers split the files
        return None
    count = min(host_batches(spec, n) for n in view.host_examples)
    if 0 < count < view.replicas:
        raise UsageError(
            f"batch_size {spec.batch_size}: the {spec.split!r} split gives each of "
            f"{view.replicas} replicas fewer than one batch; lower batch_size"
        )
    return count - count % view.replicas


def host_cut(spec: PipelineSpec, view: SplitView, count: int | None) -> int | None:
    """The examples an image epoch of this pipeline is cut to, so it yields `count` batches
    like every other host (whole steps), or None when its own share yields no more than that.
    Repeated images run on as one stream, their batches straddling epochs: never cut."""
    if count is None or spec.repeat or host_batches(spec, view.num_examples) <= count:
        return None
    return count * spec.batch_size


def host_batches(spec: PipelineSpec, n: int) -> int:
    """Batches an epoch of n examples yields for sure on one input pipeline."""
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
            f"batch_size {size} with drop_remainder: the {spec.split!r} split gives an input "
            f"pipeline {n} examples, not one full batch; lower batch_size or set "
            "drop_remainder=False"
        )
    return count


def blocks_per_group(spec: PipelineSpec) -> int:
    """Blocks gathered into one group: about shuffle_buffer examples, and at least the
    BUCKET_WINDOW batches that bucketing sorts within."""
    return -(-max(spec.shuffle_buffer, spec.batch_size * BUCKET_WINDOW) // BLOCK)


def epoch_plan(spec: PipelineSpec, seed: int, position: Any) -> Any:
    """The epochs an iterator of a resumable pipeline runs: (key, what to skip of it) pairs,
    from where the position is when the iterator starts (`InputPosition.start`), and when
    repeating on through the epochs after it; each epoch's key comes from its number alone.

    None without a position: such a pipeline runs its one epoch graph at the top level under
    a fixed key, its shuffles reseeded by tf.data on each iteration (reproducible per seed). An
    epoch plan costs each new iterator a start-up of its own (its epoch graph is instantiated
    inside `flat_map`: benchmarks/RESULTS.md, "Decisions"), and tf.data service needs the
    shard files as the pipeline's first dataset (its workers share them out).
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


def example_epoch(
    source: Any, spec: PipelineSpec, keyed: bool, seed: int, cut: int | None = None
) -> Any:
    """One epoch of single examples from its key: shuffled by the key, each paired with its
    index (key + place in the epoch, which keys its augmentation), the first `skip` examples
    left out before anything is decoded, and those past `cut` (`host_cut`). No `take` cuts the
    epoch short: the cache under it must see its end, or tf.data throws the cache away."""

    def epoch(key: Any, skip: Any) -> Any:
        ds = source(key)
        if spec.shuffle_buffer:
            ds = keyed_shuffle(ds, spec.shuffle_buffer, key)
        if cut is not None:  # read to the end, kept to the cut, before any decoding
            ds = ds.enumerate().filter(lambda i, _: i < cut).map(lambda _, example: example)
        ds = numbered(ds, key, keyed, seed)
        return ds.skip(skip) if keyed else ds

    return epoch
