"""Reading a split: shard files listed, sharded per host, shuffled, interleaved, parsed a
block of records at a time, cached and shuffled; plus the CRC-checking reader for damaged data."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from feedgpu import storage
from feedgpu.format.manifest import read_manifest
from feedgpu.pipeline.buckets import BLOCK
from feedgpu.pipeline.document_blocks import checked_block, documents_in_blocks
from feedgpu.pipeline.measure_hooks import HELD_RECORDS, StageChanges
from feedgpu.pipeline.split_view import SplitView, view_split

if TYPE_CHECKING:
    from feedgpu.pipeline.spec import PipelineSpec

logger = logging.getLogger(__name__)


# Records skipped as damaged by ignore_errors readers in this process, by shard file.
_DROPPED: Counter[str] = Counter()


def dropped_records(spec: PipelineSpec) -> int:
    """How many damaged records pipelines with ignore_errors skipped in spec's split so far.

    TensorFlow's reader stops a file at its first bad CRC; with ignore_errors, feedgpu reads
    with its own CRC-checking reader, which skips just the damaged record (a damaged length
    header still ends the file: the records after it cannot be found). Records, not examples:
    a damaged block of documents counts once.
    """
    split = read_manifest(spec.data_dir).split(spec.split, spec.data_dir)
    return sum(_DROPPED[storage.join(spec.data_dir, s.file)] for s in split.shards)


def _reader(path: Any) -> Any:
    import tensorflow as tf

    return tf.data.TFRecordDataset(path, buffer_size=8 << 20)


def _resilient_reader(path: Any) -> Any:
    import tensorflow as tf

    from feedgpu.format.records import RecordError, read_records

    def records(name: bytes) -> Any:
        file = name.decode()

        def damaged(error: RecordError) -> None:
            _DROPPED[file] += 1
            logger.warning("skipping damaged record in %s: %s", file, error)

        with storage.open_file(file, "rb") as f:
            yield from read_records(f, on_damage=damaged)

    return tf.data.Dataset.from_generator(
        records, args=(path,), output_signature=tf.TensorSpec((), tf.string)
    )


def read_dataset(spec: PipelineSpec, input_context: Any = None) -> Any:
    """The parsed, unbatched examples (dicts of tensors), for users adding their own stages.

    Files are listed, sharded by input_context, shuffled, interleaved, parsed and cached as
    the spec says; no augmentation, batching or prefetching.

    Raises:
        DatasetError: as `split_view.view_split` (missing split, another tokenizer).
        UsageError: the spec's kind is not the dataset's.
    """
    return read_examples(spec, view_split(spec, input_context), StageChanges())


def read_blocks(
    spec: PipelineSpec,
    view: SplitView,
    stages: StageChanges,
    file_seed: Any = None,
    columns: tuple[str, ...] | None = None,
) -> Any:
    """Parsed examples in blocks of up to BLOCK (dicts of batched tensors; variable-length
    features ragged): read and parsed a block at a time. Shuffled files come in file_seed's
    order (an epoch's key), or, without one, in a new order on each iteration.

    columns: parse only these features (text batching never reads a doc id); blocks of
    documents (format 3) then stay flat: ids concatenated, `length` one a document.
    """
    import tensorflow as tf

    # This host's pieces of shard files (`host_shares`): (path, records to skip, to read).
    paths, skips, takes = zip(*view.pieces, strict=True)
    pieces = (tf.constant(paths), tf.constant(skips, tf.int64), tf.constant(takes, tf.int64))
    if spec.shuffle_files and file_seed is not None:  # a stateless permutation: the key alone
        pair = tf.stack([tf.cast(file_seed, tf.int64), tf.constant(0, tf.int64)])
        order = tf.random.experimental.stateless_shuffle(tf.range(len(view.pieces)), pair)
        ds = tf.data.Dataset.from_tensor_slices(tuple(tf.gather(c, order) for c in pieces))
    else:
        ds = tf.data.Dataset.from_tensor_slices(pieces)
        if spec.shuffle_files:
            ds = ds.shuffle(len(view.pieces), seed=spec.seed, reshuffle_each_iteration=True)
    parse_spec = view.schema.parse_spec()
    if columns is not None:
        parse_spec = {k: v for k, v in parse_spec.items() if k in columns}
    interleave = {
        "cycle_length": spec.cycle_length,
        "num_parallel_calls": tf.data.AUTOTUNE,
        "deterministic": spec.deterministic,
    }
    if spec.ignore_errors:  # one record at a time, so a bad record costs only itself
        ds = ds.interleave(
            lambda path, skip, take: _resilient_reader(path).skip(skip).take(take), **interleave
        )
        if "read" in stages.skip:
            ds = ds.take(HELD_RECORDS).cache().repeat()
        # A block whose lengths do not add up is skipped too.
        checked = checked_block if view.schema.blocks else (lambda record: record)
        ds = ds.map(
            lambda record: checked(tf.io.parse_single_example(record, parse_spec)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=spec.deterministic,
        )
        ds = ds.ignore_errors().ragged_batch(BLOCK)
    else:
        # Blocks are formed inside each file's reader: a parallel interleave costs more per
        # element than a text record's parsing, so handing over blocks reads several times more
        # records a second (benchmarks/RESULTS.md, "Decisions").
        ds = ds.interleave(
            lambda path, skip, take: _reader(path).skip(skip).take(take).batch(BLOCK),
            **interleave,
        )
        ds = ds.rebatch(BLOCK)  # whole blocks across files' ends: groups count on it
        if "read" in stages.skip:
            ds = ds.take(HELD_RECORDS // BLOCK).cache().repeat()
        ds = ds.map(
            lambda records: tf.io.parse_example(records, parse_spec),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=spec.deterministic,
        )
    if view.schema.blocks:  # blocks of documents: parsed whole, then as documents
        ds = documents_in_blocks(ds, flat=columns is not None)
    if "parse" in stages.skip:
        ds = ds.take(HELD_RECORDS // BLOCK).cache().repeat()
    return ds


def cached(ds: Any, spec: PipelineSpec) -> Any:
    if spec.cache == "memory":
        return ds.cache()
    return ds.cache(spec.cache) if spec.cache else ds


def epoch_source(
    spec: PipelineSpec,
    view: SplitView,
    stages: StageChanges,
    seed: int,
    unbatched: bool,
    keyed: bool,
    columns: tuple[str, ...] | None = None,
) -> Callable[[Any], Any]:
    """The parsed records of an epoch, given the epoch's key (blocks, or single examples;
    columns: as `read_blocks`).

    Keyed (epochs run from a plan, resumable): cached, read once with the files in the seed's
    order, every later epoch replaying the cache, so the order into the shuffle never depends
    on which epoch filled the cache (a run resumed at epoch 7 must see what an uninterrupted
    one saw); not cached, read afresh each epoch with the files in the epoch's own order.
    """

    def read(file_seed: Any) -> Any:
        ds = read_blocks(spec, view, stages, file_seed, columns)
        return ds.unbatch() if unbatched else ds

    if not keyed:  # no epoch plan: files reshuffled by tf.data on each iteration
        once = cached(read(None), spec)
        return lambda key: once
    if spec.cache or not spec.shuffle_files:
        once = cached(read(seed), spec)
        return lambda key: once
    return read


def read_examples(spec: PipelineSpec, view: SplitView, stages: StageChanges) -> Any:
    """Single examples, cached, shuffled and repeated as the spec says. Cached one by one,
    not in blocks: each epoch's shuffle then takes references instead of copying every
    encoded image out of its block (benchmarks/RESULTS.md)."""
    ds = cached(read_blocks(spec, view, stages).unbatch(), spec)
    if spec.shuffle_buffer:
        ds = ds.shuffle(spec.shuffle_buffer, seed=spec.seed, reshuffle_each_iteration=True)
    if spec.repeat:
        ds = ds.repeat()
    return ds
