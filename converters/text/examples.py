"""Text examples built in bulk: token ids in, serialized `tf.train.Example`s out, one per
document or one per block of consecutive documents (`blocks`).

Building each example in Python (`records.encode_example`) holds the GIL per document, on the
one thread that also reads and writes: with the tokenizer on the other threads, that thread was
what the conversion waited for (benchmarks/RESULTS.md, "Which conversion tricks"). Here a
batch's examples come from a few numpy passes and feedgpu's compiled step (`native`), or where
it is not built `tf.io.encode_proto` ops, on the tokenizer's threads, mostly without the GIL,
with the same bytes `encode_example` gives for {"doc_id", "input_ids", "length"[, "label"]}
(tested): scalars for one document, lists for a block, its documents' ids concatenated.
"""

from __future__ import annotations

import functools
import hashlib
import threading
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


def _with_specials(values: Any, sizes: Any, before: Any, after: Any, starts: Any) -> Any:
    """Each document's [before, its own ids (its size less the special ids, from its start
    in values), after], concatenated in order."""
    import numpy as np

    nb, own = len(before), sizes - len(before) - len(after)
    ends = np.cumsum(own)
    taken = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64)
    content = values[taken + np.repeat(starts - (ends - own), own)]
    out = np.cumsum(sizes) - sizes  # each document's first position in the output
    flat = np.empty(int(sizes.sum()), np.int64)
    free = np.ones(len(flat), bool)
    for at, tokens in ((out, before), (out + nb + own, after)):
        for j, token in enumerate(tokens):
            flat[at + j] = token
            free[at + j] = False
    flat[free] = content
    return flat


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
    where built (`native`), else one graph call a batch; the same bytes.

    ids: the documents' ids, sizes (int64 numpy) their counts as stored; or, with specials
    (before, after, starts: int64 numpy), each document's own ids (its size less the special
    ids) from its start in ids, the special ids around them: the compiled step takes them
    where they are, with no array made with the special ids put in (benchmarks/RESULTS.md,
    "Issue 29, sixth session")."""
    import numpy as np
    import tensorflow as tf

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
    if specials is not None:
        ids = _with_specials(ids, sizes, *specials)

    # Each document's varint bytes (7 bits a byte, 10 for negatives), counted here: numpy's
    # cumsum is faster than TensorFlow's on CPU (benchmarks/RESULTS.md, "varint counts in
    # numpy").
    width = 1
    if len(ids):
        width = 10 if ids.min() < 0 else max(1, (int(ids.max()).bit_length() + 6) // 7)
    extra = np.zeros(len(ids), np.int8)
    for k in range(1, min(width, 9)):
        extra += ids >= 1 << (7 * k)
    if width == 10:
        extra[ids < 0] = 9
    totals = np.concatenate([[0], np.cumsum(extra, dtype=np.int64)])
    ends = np.cumsum(sizes)
    nbytes = np.asarray(sizes, np.int64) + totals[ends] - totals[ends - sizes]
    with _LOCK:  # worker threads start at once: trace once
        graph = _serializer(labels is not None, per_record is not None)
    # Tensors, not lists: a list argument is matched against the signature item by item.
    args = [
        tf.constant(ids),
        tf.constant(np.asarray(sizes, np.int64)),
        tf.constant(nbytes),
        tf.convert_to_tensor(doc_ids, tf.string),
        tf.constant(np.asarray(labels or [], np.int64)),
    ]
    if per_record is not None:
        args.append(tf.constant(np.asarray(per_record, np.int64)))
    return list(graph(*args).numpy().tolist())


_LOCK = threading.Lock()


@functools.cache
def _serializer(labelled: bool, blocks: bool) -> Any:
    """The graph: `encode_proto` ops and string joins, traced once, without autograph. Blocks
    take one more input, the documents each record holds (consecutive, in order)."""
    import tensorflow as tf

    def serialize(ids: Any, sizes: Any, nbytes: Any, doc_ids: Any, labels: Any, *rest: Any) -> Any:
        if blocks:  # each record's documents' values, as rows padded to the longest block
            per_record = rest[0]
            n = tf.size(per_record)
            counts = tf.cast(per_record, tf.int32)[:, None]
            record_of = tf.repeat(tf.range(n), per_record)
            nbytes = tf.math.segment_sum(nbytes, record_of)

            def rows(values: Any) -> Any:
                return tf.RaggedTensor.from_row_lengths(values, per_record, validate=False)

            doc_ids, sizes, labels = (rows(v).to_tensor() for v in (doc_ids, sizes, labels))
        else:
            n = tf.shape(sizes)[0]
            counts = tf.ones([n, 1], tf.int32)
            doc_ids, sizes, labels = doc_ids[:, None], sizes[:, None], labels[:, None]
        one = tf.ones([n, 1], tf.int32)

        def feature(kind: str, values: Any) -> Any:
            body = _message(f"tensorflow.{kind}", ["value"], [values], counts)
            field = "int64_list" if kind == "Int64List" else "bytes_list"
            return _message("tensorflow.Feature", [field], [body[:, None]], one)

        # Every record's ids as one packed Int64List, cut at each record's byte offsets: no
        # rows padded to the longest.
        everything = _message("tensorflow.Int64List", ["value"], [ids[None, :]], [[tf.size(ids)]])
        header = tf.cast(tf.strings.length(everything[0]), tf.int64) - tf.reduce_sum(nbytes)
        bodies = tf.strings.substr(
            everything[0], header + tf.cumsum(nbytes, exclusive=True), nbytes
        )
        small = {"doc_id": feature("BytesList", doc_ids), "length": feature("Int64List", sizes)}
        if labelled:
            small["label"] = feature("Int64List", labels)
        # Each entry of Features.feature as written there: field 1, length-delimited (a
        # BytesList of one value has that wire format).
        wrapped = {
            name: _wrap(
                _message(
                    "tensorflow.Features.FeatureEntry",
                    ["key", "value"],
                    [tf.fill([n, 1], name), value[:, None]],
                    tf.ones([n, 2], tf.int32),
                )
            )
            for name, value in small.items()
        }
        head, ids_size = _ids_head(nbytes)
        parts = {"input_ids": [head, bodies], **{k: [v] for k, v in wrapped.items()}}
        total = ids_size + sum(_size(v) for v in wrapped.values())
        ordered = [part for _, value in sorted(parts.items()) for part in value]
        return tf.strings.join(["\x0a", _varint(total), *ordered])  # Example{features}

    vector = tf.TensorSpec([None], tf.int64)
    signature = [vector, vector, vector, tf.TensorSpec([None], tf.string), vector]
    graph = tf.function(serialize, input_signature=signature + [vector] * blocks, autograph=False)
    # Traced now, once (functools.cache makes this call once): traced lazily, tokenizer threads
    # arriving together at the first batches would each trace it again.
    graph.get_concrete_function()
    return graph


def _ids_head(nbytes: Any) -> tuple[Any, Any]:
    """The input_ids entry up to its ids, as written in Features.feature, and the whole entry's
    size there (int64). Its headers depend on its ids' byte count alone: made apart and joined
    to the ids once, where nesting them as messages copied the ids at every level
    (benchmarks/RESULTS.md, "the input_ids entry's headers made apart")."""
    import tensorflow as tf

    of_nbytes = _varint(nbytes)
    listed = tf.where(nbytes > 0, 1 + _size(of_nbytes) + nbytes, 0)  # Int64List
    of_listed = _varint(listed)
    in_feature = 1 + _size(of_listed) + listed  # Feature{int64_list}
    of_feature = _varint(in_feature)
    entry = 12 + _size(of_feature) + in_feature  # FeatureEntry{key, value}
    of_entry = _varint(entry)
    head = tf.strings.join(
        [
            "\x0a",
            of_entry,
            "\x0a\x09input_ids\x12",
            of_feature,
            "\x1a",
            of_listed,
            tf.where(nbytes > 0, tf.strings.join(["\x0a", of_nbytes]), ""),
        ]
    )
    return head, 1 + _size(of_entry) + entry


def _message(kind: str, fields: list[str], values: list[Any], sizes: Any) -> Any:
    import tensorflow as tf

    return tf.io.encode_proto(sizes, values, fields, kind, descriptor_source="local://")


def _varint(values: Any) -> Any:
    """Each value's varint bytes: a packed Int64List of it, less its field key and size."""
    import tensorflow as tf

    packed = _message("tensorflow.Int64List", ["value"], [values[:, None]], _one_each(values))
    return tf.strings.substr(packed, 2, 10)


def _wrap(values: Any) -> Any:
    """Each string as field 1, length-delimited (a BytesList of one value)."""
    return _message("tensorflow.BytesList", ["value"], [values[:, None]], _one_each(values))


def _size(strings: Any) -> Any:
    import tensorflow as tf

    return tf.cast(tf.strings.length(strings), tf.int64)


def _one_each(values: Any) -> Any:
    import tensorflow as tf

    return tf.ones([tf.shape(values)[0], 1], tf.int32)


def route_key(seed: int) -> list[int]:
    """The SipHash key `route` uses for a conversion's seed: two 63-bit numbers."""
    digest = hashlib.sha256(f"feedgpu-route\0{seed}".encode()).digest()
    return [int.from_bytes(digest[i : i + 8], "big") >> 1 for i in (0, 8)]


def route(doc_ids: Any, key: list[int]) -> Any:
    """Each document's 62-bit keyed hash of its id (uint64 numpy), which picks its shard.

    One call per batch (SipHash-2-4, without the GIL) on the tokenizer threads: feedgpu's
    compiled step where it is built, else TensorFlow's op, the same values. Per document in
    Python (SHA-256 and the Python around it) it ran on the reading thread, which short
    documents keep busy (benchmarks/RESULTS.md, "Issue 16").
    """
    import numpy as np

    step = native_module("_records")
    if step is not None:
        return np.frombuffer(step.route(doc_ids, key[0], key[1], 1 << 62), np.uint64)
    import tensorflow as tf

    names = tf.convert_to_tensor(doc_ids, tf.string)  # a list of str
    hashed = tf.strings.to_hash_bucket_strong(names, 1 << 62, key)
    return hashed.numpy().astype(np.uint64)


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
