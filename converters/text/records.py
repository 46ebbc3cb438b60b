"""A tokenized batch's records: documents (one a record, or blocks of consecutive ones),
windows (--stride) or packed sequences (--pack), each routed to its shard, then serialized and
framed grouped by shard in one compiled call (`_records.serialize`), without the GIL; where it
is not built, by the Python reference (`format.records`), the same bytes.

A record goes to the shard its (first) document's seeded hash picks (`names.route`), and
blocks are cut within a batch (never across a split): neither depends on thread counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from feedgpu.converters.text.names import Names, route
from feedgpu.converters.text.native import native_module

# --docs-per-record auto: a corpus whose first documents average at most SHORT_IDS ids (special
# tokens included) is stored in blocks, a record holding the documents that start within one
# window of RECORD_IDS ids, at most RECORD_DOCS of them; longer documents one a record, as
# format 2 stores them. Blocks read short documents faster from disk and stop paying at about
# 128 ids (benchmarks/RESULTS.md, "Decisions").
SHORT_IDS = 128
SAMPLE_DOCUMENTS = 256
RECORD_IDS = 4096
RECORD_DOCS = 256
VALUES, SLICES, STRINGS = 0, 1, 2  # a column's kind (`serialize`)


def choose_per_record(mean_ids: float | None) -> int | None:
    """--docs-per-record auto for a corpus whose first documents average mean_ids ids (None:
    none read): None (blocks by size) for short documents, else 1."""
    return None if mean_ids is not None and mean_ids <= SHORT_IDS else 1


@dataclass
class Tokenized:
    """A batch as tokenized: each document's own ids (no special ids) concatenated and their
    counts (int64 numpy), names, splits and label indexes (int64 numpy, or None)."""

    ids: Any
    lengths: Any
    names: Names
    splits: list[str]
    labels: Any


@dataclass(frozen=True)
class Made:
    """A batch's records, framed, grouped by shard, and its statistics.

    Attributes:
        data: the framed records, each shard's group in record order, groups by shard index.
        groups: (shard, its group's end in data, its records), groups with records only.
        doc_shards, full, unknown: per document (int64 numpy): its shard, its ids as
            tokenized (special ids included), its unknown ids.
        example_shards, stored: per stored example (a document, a window, a packed
            sequence): its shard and its ids as stored.
    """

    data: bytes
    groups: list[tuple[int, int, int]]
    doc_shards: Any
    full: Any
    unknown: Any
    example_shards: Any
    stored: Any


def serialize(columns: list[tuple[Any, ...]], shards: Any, count: int) -> tuple[bytes, Any]:
    """Records of columns (in key order: (key, VALUES, counts, values), (key, SLICES, counts,
    pool, starts, sizes), (key, STRINGS, counts, blob, starts, sizes); counts per record),
    framed, grouped by their shards (int64 numpy, each below count): the bytes, and each
    shard's (end, records) (int64 numpy of shape (count, 2))."""
    import numpy as np

    step = native_module("_records")
    if step is not None:
        encoded = [(key.encode(), *rest) for key, *rest in columns]
        data, ends, counts = step.serialize(encoded, len(shards), shards, count)
        return data, np.stack([np.frombuffer(ends, np.int64), np.frombuffer(counts, np.int64)], 1)
    from feedgpu.format.records import encode_example, frame_record

    groups: list[list[bytes]] = [[] for _ in range(count)]
    cursors = [np.cumsum(c[2]) - c[2] for c in columns]
    for r, shard in enumerate(shards.tolist()):
        example: dict[str, Any] = {}
        for (key, kind, counts, values, *place), first in zip(columns, cursors, strict=True):
            at, n = int(first[r]), int(counts[r])
            if kind == VALUES:
                example[key] = values[at : at + n].tolist()
            elif kind == SLICES:
                spans = zip(place[0][at : at + n], place[1][at : at + n], strict=True)
                example[key] = [v for a, m in spans for v in values[a : a + m].tolist()]
            else:
                spans = zip(place[0][at : at + n], place[1][at : at + n], strict=True)
                example[key] = [values[a : a + m] for a, m in spans]
        groups[shard].append(frame_record(encode_example(example)))
    sizes = [(sum(map(len, g)), len(g)) for g in groups]
    table = np.array(sizes, np.int64).reshape(count, 2)
    table[:, 0] = np.cumsum(table[:, 0])
    return b"".join(b"".join(g) for g in groups), table


class RecordMaker:
    """A tokenized batch's records and their shards (`documents`, `windows`, `packed`).

    Args:
        shard_counts: each split's shard count, in the splits' order (a shard's index is its
            place among them all).
        key: the route's key (`route_key`).
        before, after: ids the tokenizer adds around each example (special tokens).
        max_length: each example's ids at most (special ids included), or None.
        stride: windows' overlap (with max_length), or None.
        per_record: documents a record holds (1: format 2's layout), or None: blocks by size.
        unk_id: the unknown token's id, counted per document, or None.
    """

    def __init__(
        self,
        shard_counts: dict[str, int],
        key: list[int],
        before: list[int],
        after: list[int],
        max_length: int | None,
        stride: int | None,
        per_record: int | None,
        unk_id: int | None,
    ) -> None:
        import numpy as np

        self.count = sum(shard_counts.values())
        firsts = np.cumsum([0, *shard_counts.values()])[:-1].tolist()
        counts = shard_counts.values()
        self.split_shards = dict(zip(shard_counts, zip(firsts, counts, strict=True), strict=True))
        self.key = key
        self.before = np.asarray(before, np.int64)
        self.after = np.asarray(after, np.int64)
        self.extra = len(before) + len(after)
        self.budget = None if max_length is None else max_length - self.extra
        self.stride, self.per_record, self.unk_id = stride, per_record, unk_id

    def shards(self, t: Tokenized) -> Any:
        """Each document's shard (int64 numpy): its name's hash among its split's shards."""
        import numpy as np

        hashed = route(t.names, self.key)
        if len(self.split_shards) == 1:  # the usual corpus: one split
            first, count = next(iter(self.split_shards.values()))
            return (hashed % np.uint64(count)).astype(np.int64) + first
        placed = np.array([self.split_shards[s] for s in t.splits], np.int64).reshape(-1, 2)
        return (hashed % placed[:, 1].astype(np.uint64)).astype(np.int64) + placed[:, 0]

    def _unknown(self, t: Tokenized) -> Any:
        import numpy as np

        if self.unk_id is None or not len(t.lengths):
            return np.zeros(len(t.lengths), np.int64)
        hits = np.flatnonzero(t.ids == self.unk_id)
        ends = np.cumsum(t.lengths)
        return np.bincount(np.searchsorted(ends, hits, side="right"), minlength=len(ends))

    def _pool(self, t: Tokenized) -> tuple[Any, int, int]:
        """The ids with the special ids after them, and where before and after start."""
        import numpy as np

        pool = np.concatenate([t.ids, self.before, self.after]).astype(np.int64, copy=False)
        return pool, len(t.ids), len(t.ids) + len(self.before)

    def _examples(self, t: Tokenized, starts: Any, sizes: Any) -> tuple[Any, ...]:
        """Slices of each example (before, its own ids from starts, sizes of them, after):
        the SLICES column's (pool, starts, sizes), three a example."""
        import numpy as np

        pool, at_before, at_after = self._pool(t)
        n = len(starts)
        first = np.column_stack([np.full(n, at_before), starts, np.full(n, at_after)])
        size = np.column_stack([np.full(n, len(self.before)), sizes, np.full(n, len(self.after))])
        return pool, first.astype(np.int64).ravel(), size.astype(np.int64).ravel()

    def documents(self, t: Tokenized) -> Made:
        """One example a document, truncated to max_length: records of one document, or of a
        block of consecutive documents (`cut_blocks`)."""
        import numpy as np

        lengths = t.lengths
        kept = lengths if self.budget is None else np.minimum(lengths, self.budget)
        stored = kept + self.extra
        order, sizes = cut_blocks(stored, t.splits, self.per_record)
        index = np.arange(len(lengths)) if order is None else order
        doc_shards = self.shards(t)
        own = (np.cumsum(lengths) - lengths)[index]
        pool, starts, spans = self._examples(t, own, kept[index])
        names = t.names.taken(index)
        columns: list[tuple[Any, ...]] = [
            ("doc_id", STRINGS, sizes, names.blob, names.starts, names.sizes),
            ("input_ids", SLICES, 3 * sizes, pool, starts, spans),
        ]
        if t.labels is not None:
            columns.append(("label", VALUES, sizes, t.labels[index]))
        columns.append(("length", VALUES, sizes, stored[index]))
        record_shards = doc_shards[index][np.cumsum(sizes) - sizes]
        data, table = serialize(columns, record_shards, self.count)
        placed = np.empty(len(lengths), np.int64)  # each document where its record went
        placed[index] = np.repeat(record_shards, sizes)
        return Made(
            data, _groups(table), placed, lengths + self.extra, self._unknown(t), placed, stored
        )

    def windows(self, t: Tokenized) -> Made:
        """--stride: each document's windows of max_length ids, overlapping by stride (one for
        a document that fits), each an example."""
        import numpy as np

        assert self.budget is not None and self.stride is not None
        lengths, step = t.lengths, self.budget - self.stride
        per_doc = -(-np.maximum(1, lengths - self.stride) // step)  # ceil
        doc, number = np.repeat(np.arange(len(lengths)), per_doc), _ranks(per_doc)
        offset = number * step
        size = np.minimum(self.budget, np.maximum(0, lengths[doc] - offset))
        pool, starts, spans = self._examples(t, (np.cumsum(lengths) - lengths)[doc] + offset, size)
        names = t.names.taken(doc)
        ones = np.ones(len(doc), np.int64)
        stored = size + self.extra
        columns: list[tuple[Any, ...]] = [
            ("doc_id", STRINGS, ones, names.blob, names.starts, names.sizes),
            ("input_ids", SLICES, 3 * ones, pool, starts, spans),
        ]
        if t.labels is not None:
            columns.append(("label", VALUES, ones, t.labels[doc]))
        columns += [("length", VALUES, ones, stored), ("window", VALUES, ones, number)]
        doc_shards = self.shards(t)
        data, table = serialize(columns, doc_shards[doc], self.count)
        return Made(
            data, _groups(table), doc_shards, lengths + self.extra, self._unknown(t),
            doc_shards[doc], stored,
        )  # fmt: skip

    def packed(self, t: Tokenized) -> tuple[Any, ...]:
        """--pack, a batch's part made on a tokenizer thread: each document's shard, ids as
        tokenized (special ids included) and unknown ids; its examples' ids grouped by shard
        (in order within), a byte marking each document's first id, and each shard's end
        among them (`Packer.add` packs them in order on the writing thread)."""
        import numpy as np

        pool, starts, spans = self._examples(t, np.cumsum(t.lengths) - t.lengths, t.lengths)
        shards = self.shards(t)
        sizes = spans.reshape(-1, 3).sum(axis=1)  # each document's example
        order = np.argsort(shards, kind="stable")
        slices = np.repeat(order * 3, 3) + np.tile(np.arange(3), len(order))
        spans, starts = spans[slices], starts[slices]
        grouped = pool[np.repeat(starts, spans) + _ranks(spans)]
        ordered = sizes[order]
        first = np.zeros(len(grouped), np.uint8)  # each document's first id
        first[(np.cumsum(ordered) - ordered)[ordered > 0]] = 1
        ends = np.cumsum(np.bincount(shards, weights=sizes, minlength=self.count)).astype(np.int64)
        return shards, t.lengths + self.extra, self._unknown(t), grouped, first, ends


def _groups(table: Any) -> list[tuple[int, int, int]]:
    return [(s, end, n) for s, (end, n) in enumerate(table.tolist()) if n]


def cut_blocks(stored: Any, splits: list[str], per_record: int | None) -> tuple[Any, Any]:
    """The records a batch's documents make: the documents' order (None: the batch's own;
    else each split's together) and documents per record (int64 numpy): per_record documents
    each (a split's last record fewer), or with per_record None the documents that start
    within each window of RECORD_IDS ids (stored: each one's as stored), at most RECORD_DOCS;
    documents of one split only, in the batch's order."""
    import numpy as np

    n = len(stored)
    if per_record == 1:  # a record per document: the layout of format 2
        return None, np.ones(n, np.int64)
    order = None
    group = np.zeros(n, np.int64)  # the split each document is in, as a number
    if n and len(set(splits)) > 1:
        number = {name: i for i, name in enumerate(sorted(set(splits)))}
        group = np.fromiter(map(number.__getitem__, splits), np.int64, n)
        order = np.argsort(group, kind="stable")
        group, stored = group[order], stored[order]
    index = np.arange(n, dtype=np.int64)
    cut = np.ones(n, bool)  # where a record starts
    if n:
        cut[1:] = group[1:] != group[:-1]
        first_of_split = np.maximum.accumulate(np.where(cut, index, 0))
        place = index - first_of_split  # within its split
        if per_record is not None:
            cut |= place % per_record == 0
        else:
            starts = np.cumsum(stored) - stored
            starts -= starts[first_of_split]
            window = starts // RECORD_IDS
            cut[1:] |= window[1:] != window[:-1]
            first_of_run = np.maximum.accumulate(np.where(cut, index, 0))
            cut |= (index - first_of_run) % RECORD_DOCS == 0
    firsts = np.flatnonzero(cut)
    return order, np.diff(np.append(firsts, n)).astype(np.int64)


class Packer:
    """--pack: the documents of each shard, in order, concatenated into sequences of exactly
    `length` ids; each piece of a document in a sequence is a segment (numbered from 1 in its
    sequence) with positions from 0. A shard's last sequence is padded (pad id, segment 0,
    position 0) when the chunk ends (`close`)."""

    def __init__(self, length: int, pad_id: int, count: int) -> None:
        self.length, self.pad_id, self.count = length, pad_id, count
        self.carry: dict[int, tuple[Any, Any]] = {}  # shard: ids, where a document starts

    def add(self, grouped: Any, first: Any, ends: Any) -> tuple[bytes, list[Any], Any, Any]:
        """A batch's examples' ids grouped by shard (`RecordMaker.packed`): the full
        sequences' framed records, their groups (`Made.groups`), each sequence's shard and
        real ids."""
        import numpy as np

        streams: list[tuple[Any, Any]] = []
        shards: list[int] = []
        begin = 0
        for shard, end in enumerate(ends.tolist()):
            if end == begin:
                continue
            old_ids, old_first = self.carry.get(shard, (grouped[:0], first[:0]))
            stream = np.concatenate([old_ids, grouped[begin:end]])
            marks = np.concatenate([old_first, first[begin:end]])
            begin = end
            full = len(stream) // self.length * self.length
            self.carry[shard] = (stream[full:], marks[full:])
            if full:
                streams.append((stream[:full], marks[:full]))
                shards += [shard] * (full // self.length)
        return self._records(streams, np.array(shards, np.int64))

    def close(self) -> tuple[bytes, list[Any], Any, Any]:
        """Each shard's last sequence, padded."""
        import numpy as np

        left = [(shard, tail) for shard, tail in sorted(self.carry.items()) if len(tail[0])]
        self.carry = {}
        return self._records([t for _, t in left], np.array([s for s, _ in left], np.int64))

    def _records(self, streams: list[Any], shards: Any) -> tuple[bytes, list[Any], Any, Any]:
        """Sequences of streams (each a whole number of sequences, or one to pad)."""
        import numpy as np

        if not streams:
            return b"", [], shards, np.zeros(0, np.int64)
        n = self.length
        ids = np.concatenate([s for s, _ in streams])
        marks = np.concatenate([m for _, m in streams])
        lengths = np.array([len(s) for s, _ in streams], np.int64)
        step = native_module("_records")
        if step is not None:
            grid, real = step.pack(ids, marks, lengths, n, self.pad_id)
            grid = np.frombuffer(grid, np.int64).reshape(3, -1)
            real = np.frombuffer(real, np.int64)
        else:
            grid, real = pack_reference(ids, marks, lengths, n, self.pad_id)
        each = np.full(len(shards), n, np.int64)
        columns = [
            ("input_ids", VALUES, each, grid[0]),
            ("positions", VALUES, each, grid[1]),
            ("segment_ids", VALUES, each, grid[2]),
        ]
        data, table = serialize(columns, shards, self.count)
        return data, _groups(table), shards, real


def pack_reference(ids: Any, marks: Any, lengths: Any, n: int, pad: int) -> tuple[Any, Any]:
    """The compiled `pack`'s sequences, in numpy: ids, positions and segments (3, sequences x
    n), and each sequence's real ids."""
    import numpy as np

    counts = -(-lengths // n)
    real = np.minimum(n, np.repeat(lengths, counts) - n * _ranks(counts))
    grid = np.zeros((3, int(counts.sum()) * n), np.int64)
    grid[0] = pad
    used = (np.arange(n) < real[:, None]).ravel()
    grid[0, used] = ids
    piece = np.zeros(len(used), bool)
    piece[used] = marks.astype(bool)
    piece = (piece.reshape(-1, n) | (np.arange(n) == 0)).ravel()
    counted = np.cumsum(piece).reshape(-1, n)
    grid[2] = np.where(used, (counted - counted[:, :1] + 1).ravel(), 0)
    index = np.arange(n)
    last = np.maximum.accumulate(np.where(piece.reshape(-1, n), index, 0), axis=1)
    grid[1] = np.where(used, (index - last).ravel(), 0)
    return grid, real.astype(np.int64)


def _ranks(counts: Any) -> Any:
    """0, 1, ... counts[i] - 1 for each i, concatenated."""
    import numpy as np

    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
