"""A batch of JSON lines' documents made into framed records by one compiled call.

Where every document of a batch is named by its line ("file:line") and in one split, and each
makes one example (the usual JSONL corpus), the compiled step (`_shard_records.c`) formats the
names, cuts the blocks, routes and writes the records, and frames them grouped by shard, on the
tokenizer thread without the GIL: the thread that writes only appends each group to its shard.
The same bytes as `ExampleBuilder`, `route` and `ChunkWriter.write_routed` (tested); done as those
separate steps, they were the largest of the steps after tokenizing (49.6 ms on one thread for
a 48 MB short-document corpus's batches, this 27.4: benchmarks/RESULTS.md, "Issue 29, tenth
session").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from feedgpu.converters.text.batches import Batch
from feedgpu.converters.text.blocks import RECORD_DOCS, RECORD_IDS
from feedgpu.converters.text.examples import ExampleBuilder
from feedgpu.converters.text.native import native_module
from feedgpu.converters.text.pieces import ChunkWriter
from feedgpu.converters.text.plain_wordpiece import Varints


@dataclass(frozen=True)
class FramedBatch:
    """A batch's records, framed, grouped by shard, with each document's statistics.

    Attributes:
        data: the framed records, each shard's group in record order, groups by shard index.
        shards: each group's shard (an index into the runner's names), its end in data and
            its record count: (shard, end, records), groups with records only.
        first: the span in data of the batch's first record (unframed).
        doc_shards, full, unknown, stored: per document in order (int64 numpy), as
            `ChunkWriter.count_batch` takes them.
    """

    data: bytes
    shards: list[tuple[int, int, int]]
    first: tuple[int, int]
    doc_shards: Any
    full: Any
    unknown: Any
    stored: Any


def shard_records(
    builder: ExampleBuilder,
    values: Any,
    lengths: Any,
    runs: list[tuple[str, Any]],
    key: list[int],
    shards: tuple[int, int],
) -> FramedBatch | None:
    """The records of documents named by runs of (prefix, line numbers), their ids values
    (concatenated: int64 numpy, or `Varints`; lengths each: int64 numpy), into the shards
    (first, count) of their one split; None where the compiled step is not built or the
    builder's examples carry labels."""
    import numpy as np

    step = native_module("_records")
    if step is None or builder.labelled:
        return None
    first, count = shards
    numbers = np.concatenate([lines for _, lines in runs]) if len(runs) > 1 else runs[0][1]
    if isinstance(values, Varints):  # written by the JSON-lines step already
        ids: Any = (values.data, values.sizes, values.unknown)
    else:
        ids = np.ascontiguousarray(values, np.int64)
    data, ends, counts, span, *per_doc = step.shard_records(
        ids,
        np.ascontiguousarray(lengths, np.int64),
        np.ascontiguousarray(numbers, np.int64),
        [prefix for prefix, _ in runs],
        np.array([len(lines) for _, lines in runs], np.int64),
        builder.before,
        builder.after,
        -1 if builder.budget is None else builder.budget,
        -1 if builder.unk_id is None else builder.unk_id,
        0 if builder.per_record is None else builder.per_record,
        RECORD_IDS,
        RECORD_DOCS,
        key[0],
        key[1],
        count,
    )
    ends = np.frombuffer(ends, np.int64).tolist()
    counts = np.frombuffer(counts, np.int64).tolist()
    groups = [(first + i, end, n) for i, (end, n) in enumerate(zip(ends, counts, strict=True)) if n]
    doc_shards, full, unknown, stored = (np.frombuffer(b, np.int64) for b in per_doc)
    return FramedBatch(data, groups, span, doc_shards + first, full, unknown, stored)


def framed_batch(
    builder: ExampleBuilder,
    batch: Batch,
    values: Any,
    lengths: Any,
    key: list[int],
    split_shards: dict[str, tuple[int, int]],
) -> FramedBatch | None:
    """A tokenized batch's records by `shard_records` (its ids values, lengths), where every
    document is named by its line and in one split (split_shards: each split's first shard
    and count); else None."""
    split = batch.splits[0] if batch.splits else ""
    if not batch.runs or batch.doc_ids or batch.splits.count(split) != len(batch):
        return None
    return shard_records(builder, values, lengths, batch.runs, key, split_shards[split])


def varints_unk(builder: ExampleBuilder | None, batch: Batch) -> int | None:
    """The unknown token's id where a batch of raw lines, once tokenized, will be framed by
    `shard_records` (its lines in one split, examples without labels, the compiled step
    built): its ids are then best made as `Varints`. Else None."""
    splits = {split for _, _, _, split in batch.raw}
    if builder is None or builder.labelled or builder.unk_id is None or batch.texts:
        return None
    if len(splits) != 1 or None in splits or native_module("_records") is None:
        return None
    return builder.unk_id


def write_framed(writer: ChunkWriter, names: Sequence[str], framed: FramedBatch) -> int:
    """A batch's framed records onto their shards' pieces (names: each shard's piece key),
    with its statistics; its tokens."""
    writer.check_first(framed.data[slice(*framed.first)])
    writer.count_batch(names, framed.doc_shards, framed.full, framed.unknown, framed.stored)
    data, start = memoryview(framed.data), 0
    for shard, end, records in framed.shards:
        writer.put_framed(names[shard], data[start:end], records)
        start = end
    return int(framed.full.sum())
