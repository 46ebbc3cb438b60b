"""Text examples built in bulk: token ids in, serialized `tf.train.Example`s out, one per
document or one per block of consecutive documents (`blocks`).

Building each example in Python (`records.encode_example`) holds the GIL per document, on the
one thread that also reads and writes: with the tokenizer on the other threads, that thread was
what the conversion waited for (benchmarks/RESULTS.md, "Which conversion tricks"). Here a
batch's examples come from a few numpy passes and feedgpu's compiled step (`native`), on the
tokenizer's threads, without the GIL, with the same bytes `encode_example` gives for
{"doc_id", "input_ids", "length"[, "label"]} (tested), which writes them where the step is not
built: scalars for one document, lists for a block, its documents' ids concatenated.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from feedgpu.converters.text.blocks import Blocks, cut_blocks
from feedgpu.converters.text.native import native_module


@dataclass(frozen=True)
class BuiltExamples:
    """A batch's serialized examples with each document's statistics, in record order.

    Attributes:
        records: serialized `tf.train.Example`s, one per record.
        blocks: which documents each record holds (`Blocks.order`: the documents' order).
        full_lengths: ids per document with special tokens, before truncation (int64 numpy).
        unknown: unknown-token ids per document (int64 numpy).
        stored: ids per document as stored (truncated; int64 numpy).
    """

    records: list[bytes]
    blocks: Blocks
    full_lengths: Any
    unknown: Any
    stored: Any


class ExampleBuilder:
    """Special tokens, truncation and serialization of one example per document.

    Args:
        before, after: ids the tokenizer adds around a sequence (special tokens).
        max_length: truncate each example to this many ids (special tokens kept), or None.
        unk_id: the unknown token's id, counted per document, or None.
        labelled: whether every example carries a label.
        per_record: documents a record holds (1: format 2's layout, scalar features), or
            None for `blocks.cut_blocks`'s rule by size.
    """

    def __init__(
        self,
        before: list[int],
        after: list[int],
        max_length: int | None,
        unk_id: int | None,
        labelled: bool,
        per_record: int | None = 1,
    ) -> None:
        import numpy as np

        self.extra = len(before) + len(after)
        self.budget = None if max_length is None else max_length - self.extra
        self.labelled = labelled
        self.before = np.asarray(before, np.int64)
        self.after = np.asarray(after, np.int64)
        self.unk_id = unk_id
        self.per_record = per_record

    def __call__(
        self,
        values: Any,
        lengths: Any,
        doc_ids: Sequence[str],
        labels: list[int] | None,
        splits: list[str],
    ) -> BuiltExamples:
        """Examples of a batch; values are the documents' ids concatenated (int64 numpy),
        doc_ids each document's (str), splits each document's split (a record holds one
        split's)."""
        import numpy as np

        if self.labelled and (labels is None or len(labels) != len(lengths)):
            raise ValueError("a labelled dataset's batch needs one label per document")
        kept = lengths if self.budget is None else np.minimum(lengths, self.budget)
        blocks = cut_blocks(kept + self.extra, splits, self.per_record)
        if not len(lengths):
            empty = np.zeros(0, np.int64)
            return BuiltExamples([], blocks, empty, empty, empty)
        ends = np.cumsum(lengths)
        starts = ends - lengths  # where each document's own ids begin
        unknown = np.zeros(len(lengths), np.int64)
        if self.unk_id is not None:  # each hit's document, by where it falls among the ends
            hits = np.flatnonzero(values == self.unk_id)
            unknown = np.bincount(np.searchsorted(ends, hits, side="right"), minlength=len(ends))
        if blocks.order is not None:  # documents of each split together
            starts, lengths, kept, unknown = (
                starts[blocks.order],
                lengths[blocks.order],
                kept[blocks.order],
                unknown[blocks.order],
            )
            doc_ids = [doc_ids[i] for i in blocks.order.tolist()]
            labels = [labels[i] for i in blocks.order.tolist()] if labels else labels
        records = _serialize(
            values,
            kept + self.extra,
            doc_ids,
            labels if self.labelled else None,
            None if self.per_record == 1 else blocks.sizes,
            (self.before, self.after, starts),
        )
        return BuiltExamples(records, blocks, lengths + self.extra, unknown, kept + self.extra)


def _serialize(
    ids: Any,
    sizes: Any,
    doc_ids: Sequence[str],
    labels: list[int] | None,
    per_record: Any,
    specials: tuple[Any, Any, Any] | None = None,
) -> list[bytes]:
    """`tf.train.Example`s of {doc_id, input_ids, length[, label]}: scalars of one document
    each, or (per_record: documents a record holds) lists of a block. By the compiled step
    where built (`native`), else by `format.records.encode_example`; the same bytes.

    ids: with specials (before, after, starts: int64 numpy), each document's own ids (its
    size less the special ids) from its start in ids, the special ids around them: the
    compiled step takes them where they are, with no array made with the special ids put in
    (benchmarks/RESULTS.md, "Issue 29, sixth session"); without, the ids as stored."""
    import numpy as np

    step = native_module("_records")
    if step is not None:
        return step.examples(
            np.ascontiguousarray(ids, np.int64),
            np.ascontiguousarray(sizes, np.int64),
            doc_ids,
            None if labels is None else np.asarray(labels, np.int64),
            None if per_record is None else np.ascontiguousarray(per_record, np.int64),
            *(np.ascontiguousarray(part, np.int64) for part in specials or ()),
        )
    from feedgpu.format.records import encode_example

    sizes = np.asarray(sizes, np.int64)
    if specials is not None:
        before, after, starts = specials
        own = sizes - len(before) - len(after)
        ids = [
            np.concatenate([before, ids[a : a + n], after])
            for a, n in zip(starts, own, strict=True)
        ]
    else:
        ids = np.split(ids, np.cumsum(sizes)[:-1]) if len(sizes) else []
    counts = [1] * len(sizes) if per_record is None else np.asarray(per_record).tolist()
    records, first = [], 0
    for count in counts:
        docs = range(first, first + count)
        first += count
        example: dict[str, Any] = {
            "doc_id": [doc_ids[d] for d in docs],
            "input_ids": np.concatenate([ids[d] for d in docs]),
            "length": sizes[first - count : first].tolist(),
        }
        if labels is not None:
            example["label"] = [labels[d] for d in docs]
        if per_record is None:  # a document a record: scalars
            example = {k: v if k == "input_ids" else v[0] for k, v in example.items()}
        records.append(encode_example(example))
    return records


def route_key(seed: int) -> list[int]:
    """The SipHash key `route` uses for a conversion's seed: two 63-bit numbers."""
    digest = hashlib.sha256(f"feedgpu-route\0{seed}".encode()).digest()
    return [int.from_bytes(digest[i : i + 8], "big") >> 1 for i in (0, 8)]


def route(doc_ids: Any, key: list[int]) -> Any:
    """Each document's 62-bit keyed hash of its id (uint64 numpy), which picks its shard:
    SipHash-2-4, TensorFlow's `to_hash_bucket_strong`'s. One call per batch, without the GIL,
    on the tokenizer threads, by the compiled step where built, else by `siphash` (the same
    values, slower): per document in Python it ran on the reading thread, which short
    documents keep busy (benchmarks/RESULTS.md, "Issue 16")."""
    import numpy as np

    step = native_module("_records")
    if step is not None:
        return np.frombuffer(step.route(doc_ids, key[0], key[1], 1 << 62), np.uint64)
    hashed = [siphash(key[0], key[1], d.encode() if isinstance(d, str) else d) for d in doc_ids]
    return np.array([h % (1 << 62) for h in hashed], np.uint64)


_MASK = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _MASK


def siphash(k0: int, k1: int, data: bytes) -> int:
    """SipHash-2-4 of data under the key (k0, k1): the reference algorithm, as the compiled
    step's `feedgpu_siphash`."""
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D, k0 ^ 0x6C7967656E657261]
    v.append(k1 ^ 0x7465646279746573)

    def rounds(n: int) -> None:
        for _ in range(n):
            v[0] = (v[0] + v[1]) & _MASK
            v[1] = _rotl(v[1], 13) ^ v[0]
            v[0] = _rotl(v[0], 32)
            v[2] = (v[2] + v[3]) & _MASK
            v[3] = _rotl(v[3], 16) ^ v[2]
            v[0] = (v[0] + v[3]) & _MASK
            v[3] = _rotl(v[3], 21) ^ v[0]
            v[2] = (v[2] + v[1]) & _MASK
            v[1] = _rotl(v[1], 17) ^ v[2]
            v[2] = _rotl(v[2], 32)

    tail = len(data) % 8
    words = [int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data) - tail, 8)]
    words.append(int.from_bytes(data[len(data) - tail :], "little") | (len(data) & 0xFF) << 56)
    for m in words:
        v[3] ^= m
        rounds(2)
        v[0] ^= m
    v[2] ^= 0xFF
    rounds(4)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def flat_ids(per_text: Sequence[Any]) -> tuple[Any, Any]:
    """Id lists as (their concatenation, their lengths), int64 numpy."""
    import numpy as np

    lengths = np.fromiter(map(len, per_text), np.int64, len(per_text))
    if not per_text:
        return np.zeros(0, np.int64), lengths
    # One array per text, then one concatenation: iterating the ids one by one (numpy views
    # among them after a redo) was a measurable part of a real-like conversion
    # (benchmarks/RESULTS.md, "a redo's ids concatenated").
    values = np.concatenate([np.asarray(ids, np.int64) for ids in per_text])
    return values.astype(np.int64, copy=False), lengths


def splice_ids(values: Any, lengths: Any, at: Sequence[int], replaced: Sequence[Any]) -> Any:
    """Concatenated per-text ids (values, lengths) with texts `at` (ascending) given the ids
    `replaced`: (values, lengths), int64 numpy. Only the replaced texts are touched: cutting
    every text out and joining them again, for the few a batch redoes, was a measurable part
    of a real-like conversion (benchmarks/RESULTS.md, "Issue 29")."""
    import numpy as np

    starts = (np.cumsum(lengths) - lengths).tolist()
    old = lengths.tolist()
    pieces, kept = [], 0
    for i, ids in zip(at, replaced, strict=True):
        pieces += [values[kept : starts[i]], np.asarray(ids, np.int64)]
        kept = starts[i] + old[i]
    pieces.append(values[kept:])
    lengths = lengths.copy()
    lengths[list(at)] = [len(ids) for ids in replaced]
    return np.concatenate(pieces).astype(np.int64, copy=False), lengths


def per_text_ids(values: Any, lengths: Any) -> list[Any]:
    """The inverse of `flat_ids`: each text's ids, as views of the concatenation."""
    import numpy as np

    return np.split(values, np.cumsum(lengths)[:-1]) if len(lengths) else []
