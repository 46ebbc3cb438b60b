"""A batch's records (`records`): the one compiled serializer against the Python reference and
TensorFlow's parser; routing and names against their references; windows and packing against
a document-by-document model of what they store."""

from __future__ import annotations

import random
import string
from typing import Any

import numpy as np
import pytest

from feedgpu.converters.text.names import Names, route, route_key, siphash
from feedgpu.converters.text.native import NO_NATIVE_ENV
from feedgpu.converters.text.records import (
    SLICES,
    STRINGS,
    VALUES,
    Packer,
    RecordMaker,
    Tokenized,
    serialize,
)
from feedgpu.format.records import decode_example, read_records


def _columns(rng: random.Random, n: int) -> list[tuple[Any, ...]]:
    """Random columns of every kind for n records: ids of every varint width (negative ones
    ten bytes), empty lists of ids, non-ASCII and empty strings."""
    widths = [0, 1, 127, 128, 16383, 16384, 1 << 40, -1, -(1 << 62)]
    # (No empty list of strings: the reference writes an empty list as an Int64List's, and
    # no record a converter writes has one.)
    counts = [np.array([rng.randint(k // 2, 4) for _ in range(n)], np.int64) for k in range(3)]
    values = np.array([rng.choice(widths) for _ in range(int(counts[0].sum()))], np.int64)
    pool = np.array([rng.choice(widths) for _ in range(50)], np.int64)
    starts = np.array([rng.randint(0, 49) for _ in range(int(counts[1].sum()))], np.int64)
    sizes = np.array([rng.randint(0, 50 - s) for s in starts.tolist()], np.int64)
    words = ["", "a", "é東", "x" * 200, "doc.jsonl:12"]
    blob = "".join(rng.choice(words) for _ in range(30)).encode()
    bstarts = np.array([rng.randint(0, len(blob)) for _ in range(int(counts[2].sum()))], np.int64)
    bsizes = np.array([rng.randint(0, len(blob) - s) for s in bstarts.tolist()], np.int64)
    return [
        ("a_values", VALUES, counts[0], values),
        ("b_slices", SLICES, counts[1], pool, starts, sizes),
        ("c_strings", STRINGS, counts[2], blob, bstarts, bsizes),
    ]


def test_serializer_writes_the_references_bytes(
    records: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled serializer and the Python reference (`format.records.encode_example`,
    framing) write the same framed groups for random columns, shards and record counts
    (none included); TensorFlow's own parser reads the values back."""
    import tensorflow as tf

    rng = random.Random(3)
    for n in [0, 1, 2, 7, 40]:
        columns = _columns(rng, n)
        count = rng.randint(1, 4)
        shards = np.array([rng.randrange(count) for _ in range(n)], np.int64)
        data, table = serialize(columns, shards, count)
        monkeypatch.setenv(NO_NATIVE_ENV, "1")
        reference, ref_table = serialize(columns, shards, count)
        monkeypatch.delenv(NO_NATIVE_ENV)
        assert data == reference and table.tolist() == ref_table.tolist()
        assert table[:, 1].tolist() == np.bincount(shards, minlength=count).tolist()
        import io

        found = list(read_records(io.BytesIO(data)))
        assert len(found) == n
        spec = {
            "a_values": tf.io.VarLenFeature(tf.int64),
            "b_slices": tf.io.VarLenFeature(tf.int64),
            "c_strings": tf.io.VarLenFeature(tf.string),
        }
        order = np.argsort(shards, kind="stable").tolist()
        firsts = [np.cumsum(c[2]) - c[2] for c in columns]
        for record, r in zip(found, order, strict=True):
            parsed = tf.io.parse_single_example(record, spec)
            values = {k: tf.sparse.to_dense(v).numpy().tolist() for k, v in parsed.items()}
            (_, _, c0, v0), (_, _, c1, pool, st, sz), (_, _, c2, blob, bst, bsz) = columns
            a0, a1, a2 = (int(f[r]) for f in firsts)
            assert values["a_values"] == v0[a0 : a0 + c0[r]].tolist()
            slices = zip(st[a1 : a1 + c1[r]].tolist(), sz[a1 : a1 + c1[r]].tolist(), strict=True)
            assert values["b_slices"] == [v for s, m in slices for v in pool[s : s + m].tolist()]
            strings = zip(bst[a2 : a2 + c2[r]].tolist(), bsz[a2 : a2 + c2[r]].tolist(), strict=True)
            assert values["c_strings"] == [blob[s : s + m] for s, m in strings]


def test_serializer_refuses_columns_that_do_not_add_up(records: Any) -> None:
    """Counts that do not cover their values, slices or strings outside their pool or blob,
    a shard out of range, a key too long: a clear ValueError, never a read outside them."""
    ids = np.arange(5, dtype=np.int64)
    one = np.ones(1, np.int64)
    good = [(b"k", VALUES, one * 5, ids)]
    records.serialize(good, 1, np.zeros(1, np.int64), 1)
    bad = [
        ([(b"k", VALUES, one * 4, ids)], 1),
        ([(b"k", VALUES, -one, ids)], 1),
        ([(b"k", SLICES, one, ids, np.array([3]), np.array([3]))], 1),
        ([(b"k", SLICES, one, ids, np.array([-1]), np.array([1]))], 1),
        ([(b"k", STRINGS, one, b"abc", np.array([2]), np.array([2]))], 1),
        ([(b"k" * 200, VALUES, one * 5, ids)], 1),
        ([(b"k", VALUES, one * 5, ids)], 2),
    ]
    for columns, n in bad:
        with pytest.raises(ValueError):
            records.serialize(columns, n, np.zeros(n, np.int64), 1)
    with pytest.raises(ValueError):
        records.serialize(good, 1, np.array([1], np.int64), 1)


def test_routes_and_names_are_their_python_references(
    records: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the compiled step, names are made and routed in Python (`siphash`): the same
    names and SipHash-2-4 values, so the same shards, for names of every length (each tail
    size), empty, non-ASCII."""
    rng = random.Random(21)
    texts = ["", "a", "file.jsonl:1", "é" * 9]
    texts += ["".join(rng.choices(string.printable, k=rng.randint(0, 40))) for _ in range(300)]
    names = Names.of(texts)
    assert names.strings() == texts
    key = route_key(7)
    compiled = route(names, key).tolist()
    assert compiled == [siphash(*key, t.encode()) % (1 << 62) for t in texts]
    numbers = np.array([1, 9, 10, 12345678901, 0], np.int64)
    made = Names.numbered("dir/é.jsonl:", numbers)
    monkeypatch.setenv(NO_NATIVE_ENV, "1")
    assert route(names, key).tolist() == compiled
    assert Names.numbered("dir/é.jsonl:", numbers).strings() == made.strings()
    assert made.strings()[3] == "dir/é.jsonl:12345678901"


def _tokenized(rng: random.Random, n: int, labelled: bool) -> Tokenized:
    lengths = np.array([rng.choice([0, 1, 3, 9, 30]) for _ in range(n)], np.int64)
    ids = np.array([rng.randint(0, 50) for _ in range(int(lengths.sum()))], np.int64)
    labels = np.array([rng.randint(0, 2) for _ in range(n)], np.int64) if labelled else None
    splits = [rng.choice(["train", "test"]) for _ in range(n)]
    return Tokenized(ids, lengths, Names.of([f"d{i}" for i in range(n)]), splits, labels)


def _stored(made: Any) -> list[dict]:
    import io

    return [decode_example(r) for r in read_records(io.BytesIO(made.data))]


@pytest.mark.parametrize("labelled", [True, False])
def test_windows_are_each_documents_overlapping_slices(labelled: bool) -> None:
    rng = random.Random(5)
    t = _tokenized(rng, 60, labelled)
    maker = RecordMaker({"train": 2, "test": 1}, route_key(0), [101], [102], 8, 2, 1, 7)
    made = maker.windows(t)
    by_shard = maker.shards(t)
    want: dict[int, list[dict]] = {}
    in_order: list[int] = []  # each window's stored length, in the batch's order
    starts = np.cumsum(t.lengths) - t.lengths
    for d in range(len(t.lengths)):
        content = t.ids[starts[d] : starts[d] + t.lengths[d]].tolist()
        for number, s in enumerate(range(0, max(1, len(content) - 2), 4)):
            ids = [101, *content[s : s + 6], 102]
            row = {"doc_id": [f"d{d}".encode()], "input_ids": ids, "length": [len(ids)]}
            row["window"] = [number]
            if labelled:
                row["label"] = [int(t.labels[d])]
            want.setdefault(int(by_shard[d]), []).append(row)
            in_order.append(len(ids))
    expected = [row for shard in sorted(want) for row in want[shard]]
    assert _stored(made) == expected
    assert made.stored.tolist() == in_order


def test_packing_matches_a_document_by_document_packer() -> None:
    """Documents packed into sequences of exactly `length` ids, per shard, batch after batch,
    the last padded at close: the same sequences (ids, segments from 1, positions from 0 for
    each piece) as packing each document in turn."""
    rng = random.Random(9)
    maker = RecordMaker({"train": 3}, route_key(1), [1], [2], None, None, 1, None)
    packer = Packer(16, 0, 3)
    model: dict[int, list[list[int]]] = {}  # each shard's buffer: ids, segments, positions
    want: dict[int, list[dict]] = {}

    def emit(shard: int, buffer: list[list[int]]) -> None:
        pad = 16 - len(buffer[0])
        row = {"input_ids": buffer[0] + [0] * pad, "positions": buffer[2] + [0] * pad}
        row["segment_ids"] = buffer[1] + [0] * pad
        want.setdefault(shard, []).append(row)
        buffer[0], buffer[1], buffer[2] = [], [], []

    got: list[dict] = []
    real_ids, all_ids = 0, 0
    for _ in range(4):
        t = _tokenized(rng, 30, False)
        t.splits = ["train"] * 30
        shards, _, _, grouped, first, ends = maker.packed(t)
        data, _, _, real = packer.add(grouped, first, ends)
        got += _stored(type("M", (), {"data": data})())
        real_ids, all_ids = real_ids + int(real.sum()), all_ids + len(grouped)
        starts = np.cumsum(t.lengths) - t.lengths
        for d, shard in enumerate(shards.tolist()):
            example = [1, *t.ids[starts[d] : starts[d] + t.lengths[d]].tolist(), 2]
            buffer = model.setdefault(shard, [[], [], []])
            rest = example
            while rest:
                take, rest = rest[: 16 - len(buffer[0])], rest[16 - len(buffer[0]) :]
                segment = (buffer[1][-1] if buffer[1] else 0) + 1
                buffer[0] += take
                buffer[1] += [segment] * len(take)
                buffer[2] += range(len(take))
                if len(buffer[0]) == 16:
                    emit(shard, buffer)
    data, _groups, shards, last_real = packer.close()
    got += _stored(type("M", (), {"data": data})())
    assert real_ids + int(last_real.sum()) == all_ids  # every id stored once, as a real one
    for shard, buffer in sorted(model.items()):
        if buffer[0]:
            emit(shard, buffer)
    # Batch by batch, each batch's records are grouped by shard; per shard the order holds.
    for rows in want.values():
        assert [r for r in got if r in rows] == rows
    assert len(got) == sum(map(len, want.values()))


def test_compiled_packing_is_the_numpy_reference(records: Any) -> None:
    """Streams of every length (empty, under, at and over a sequence, several sequences),
    documents starting anywhere: the compiled `pack` and `pack_reference` agree."""
    from feedgpu.converters.text.records import pack_reference

    rng = np.random.default_rng(4)
    for n in (1, 7, 16):
        lengths = rng.choice([0, 1, n - 1, n, n + 1, 3 * n], 12).astype(np.int64)
        ids = rng.integers(0, 9, int(lengths.sum())).astype(np.int64)
        marks = (rng.random(len(ids)) < 0.2).astype(np.uint8)
        grid, real = records.pack(ids, marks, lengths, n, 5)
        want_grid, want_real = pack_reference(ids, marks, lengths, n, 5)
        assert np.frombuffer(grid, np.int64).tolist() == want_grid.ravel().tolist()
        assert np.frombuffer(real, np.int64).tolist() == want_real.tolist()
    with pytest.raises(ValueError):
        records.pack(ids, marks[:-1], lengths, 16, 5)
