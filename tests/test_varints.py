"""Ids written straight as varints by the JSON-lines step where a batch's records are framed
from them (`plain_wordpiece.Varints`): the same ids as int64, the same records and statistics
from `shard_records`, refusals of varints that do not add up, and a conversion mixing batches
of varints and of int64 ids (lines left to Python) the same bytes as one without the steps."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import word_files
from test_native import _hf, _step, _texts, _vocab

from feedgpu.converters.text.native import NO_NATIVE_ENV
from feedgpu.converters.text.plain_wordpiece import Varints
from feedgpu.format.records import encode_varints


def as_varints(values: Any, lengths: Any, unk: int) -> Varints:
    """Documents' ids as the JSON-lines step writes them, made here one by one."""
    docs = np.split(np.asarray(values), np.cumsum(lengths)[:-1]) if len(lengths) else []
    encoded = [encode_varints(doc.tolist()) for doc in docs]
    return Varints(
        b"".join(encoded),
        np.array([len(e) for e in encoded], np.int64),
        np.array([int((doc == unk).sum()) for doc in docs], np.int64),
    )


def framing_kinds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each batch's ids reach `framed.shard_records` as, in order: "varints" or "ids"."""
    from feedgpu.converters.text import framed

    kinds: list[str] = []
    real = framed.shard_records

    def spied(builder: Any, values: Any, *args: Any) -> Any:
        kinds.append("varints" if isinstance(values, Varints) else "ids")
        return real(builder, values, *args)

    monkeypatch.setattr(framed, "shard_records", spied)
    return kinds


def test_varints_read_back_as_the_ids_at_every_width() -> None:
    rng = np.random.default_rng(4)
    ids = np.concatenate([rng.integers(0, 1 << (7 * k), 50) for k in range(1, 10)])
    rng.shuffle(ids)
    lengths = np.array([100, 0, 250, 100], np.int64)
    made = as_varints(ids, lengths, 1)
    assert made.ids().tolist() == ids.tolist()
    halves = [as_varints(ids[:100], lengths[:1], 1), as_varints(ids[100:], lengths[1:], 1)]
    joined = Varints.join(halves)
    assert (joined.data, joined.sizes.tolist()) == (made.data, made.sizes.tolist())
    assert Varints(b"", np.zeros(0, np.int64), np.zeros(0, np.int64)).ids().tolist() == []


@pytest.mark.parametrize("size", [100, 3000, 20000], ids=["1-byte", "2-byte", "3-byte"])
def test_json_lines_step_writes_each_documents_ids_as_varints(module: Any, size: int) -> None:
    """Vocabularies whose ids take one to three varint bytes, lines it takes, leaves (not
    JSON, not plain) and skips (blank): the varints are its int64 ids, document by document,
    with each one's bytes and unknown ids."""
    from feedgpu.converters.text.raw_lines import joined

    rng = random.Random(size)
    vocab = _vocab(rng, size)
    unk = vocab.index("[UNK]")
    step = _step(module, vocab, _hf(vocab, lowercase=True), lowercase=True)
    lines = [json.dumps({"text": t}).encode() for t in _texts(rng, vocab, 600)]
    lines[5:5] = [b"{broken", b"   ", json.dumps({"text": "caf\u00e9 \u2603"}).encode()]
    data, ends = joined([line + b"\n" for line in lines])
    ids = step.lines_of("text")
    assert ids is not None
    values, lengths, taken, left = ids(data, ends)
    found, lengths2, taken2, left2 = ids(data, ends, unk)
    assert isinstance(found, Varints)
    assert (lengths2.tolist(), taken2.tolist(), left2.tolist()) == (
        lengths.tolist(),
        taken.tolist(),
        left.tolist(),
    )
    assert len(left) >= 2 and len(taken) > 500
    want = as_varints(values, lengths, unk)
    assert found.data == want.data and found.ids().tolist() == values.tolist()
    assert found.sizes.tolist() == want.sizes.tolist()
    assert found.unknown.tolist() == want.unknown.tolist() and found.unknown.sum() > 0
    widest = len(encode_varints([size - 1]))  # ids of every width the vocabulary has are written
    assert {len(encode_varints([int(i)])) for i in values} == set(range(1, widest + 1))


@pytest.mark.parametrize("per_record", [None, 1])
@pytest.mark.parametrize("max_length", [None, 9])
def test_shard_records_from_varints_are_those_from_the_ids(
    records: Any, per_record: int | None, max_length: int | None
) -> None:
    """Documents truncated or not (unknown ids in the cut part too), empty ones, ids of one
    to three bytes: the same framed bytes, shards and statistics from varints as from ids."""
    from feedgpu.converters.text.examples import ExampleBuilder, route_key
    from feedgpu.converters.text.framed import shard_records

    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 30, 300)
    lengths[::13] = 0
    values = rng.integers(0, 40000, int(lengths.sum()))
    values[::4] = 1
    runs = [("a.jsonl:", np.arange(1, 201, dtype=np.int64)), ("b:", np.arange(100, dtype=np.int64))]
    builder = ExampleBuilder([101], [102], max_length, 1, False, per_record)
    args = (lengths, runs, route_key(2), (3, 4))
    want = shard_records(builder, values, *args)
    got = shard_records(builder, as_varints(values, lengths, 1), *args)
    assert want is not None and got is not None
    assert (got.data, got.shards, got.first) == (want.data, want.shards, want.first)
    for name in ("doc_shards", "full", "unknown", "stored"):
        assert getattr(got, name).tolist() == getattr(want, name).tolist(), name


def test_shard_records_refuses_varints_that_do_not_add_up(records: Any) -> None:
    """Sizes that miss bytes or run past them, a document's last byte not a varint's last,
    fewer bytes than ids or more than ten an id, another count of varints than of ids, more
    unknown ids than ids, arrays of another count: a clear error."""
    lengths = np.array([2, 1], np.int64)
    good = (b"\x05\x81\x01\x07", np.array([3, 1], np.int64), np.zeros(2, np.int64))
    rest = (
        lengths,
        np.array([1, 2], np.int64),
        ["a:"],
        np.array([2], np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        -1,
        1,
        1,
        64,
        8,
        0,
        0,
        1,
    )
    assert records.shard_records(good, *rest)[2] == np.array([2], np.int64).tobytes()
    bad = [
        (b"\x05\x81\x01", good[1], good[2]),  # sizes past the bytes
        (b"\x05\x81\x01\x07\x07", good[1], good[2]),  # bytes past the sizes
        (b"\x05\x81\x81\x07", good[1], good[2]),  # a document not ending a varint
        (b"\x05\x07", np.array([1, 1], np.int64), good[2]),  # fewer bytes than ids
        (b"\x05" + b"\x81" * 20 + b"\x01\x07", np.array([22, 1], np.int64), good[2]),
        (good[0], np.array([3, 1, 0], np.int64), good[2]),
        (good[0], good[1], np.zeros(1, np.int64)),
        (b"\x80\x01\x07", np.array([2, 1], np.int64), good[2]),  # one varint, not two
        (good[0], good[1], np.array([3, 0], np.int64)),  # more unknown ids than ids
        (good[0], good[1], np.array([-1, 0], np.int64)),
    ]
    for given in bad:
        with pytest.raises(ValueError, match="varints"):
            records.shard_records(given, *rest)


def test_batches_of_varints_and_of_ids_convert_as_without_the_steps(
    module: Any, records: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small batches, some holding a line left to Python (their ids int64, the left one's
    inserted), most not (varints), two files in a batch: the same shards and statistics as
    without the compiled steps, with max_length cutting some documents."""
    from feedgpu import read_manifest
    from feedgpu.converters.text import batches
    from feedgpu.converters.text.convert import TextOptions, convert_text

    rng = random.Random(9)
    vocab = _vocab(rng, 3000)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    src = tmp_path / "src"
    src.mkdir()
    words = [t.removeprefix("##") for t in vocab[10:] if t.isascii()] + ["QQzz", "x" * 120]
    for name in ("a", "b"):
        texts = [" ".join(rng.choices(words, k=rng.randint(1, 40))) for _ in range(700)]
        lines = [json.dumps({"text": t}) for t in texts]
        lines[300] = json.dumps({"text": "form\ffeed"})  # left to Python
        (src / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(batches, "BATCH_CHARS", 20000)
    kinds = framing_kinds(monkeypatch)
    outs = []
    options = TextOptions(tokenizer=str(tmp_path / "vocab.txt"), max_length=24, num_shards=2)
    for flag in ("0", "1"):
        monkeypatch.setenv(NO_NATIVE_ENV, flag)
        outs.append(tmp_path / f"out{flag}")
        convert_text(str(src), str(outs[-1]), options, quiet=True)
    assert kinds.count("ids") >= 1 and kinds.count("varints") > 3
    names = sorted(p.name for p in outs[0].glob("*.tfrecord-*"))
    assert len(names) == 2
    for name in names:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    stats = [read_manifest(str(out)).to_json()["text"] for out in outs]
    assert stats[0] == stats[1]
    assert max(int(n) for n, _ in stats[0]["length_counts"]) == 24  # some cut to max_length


def test_a_batch_whose_left_lines_are_all_skipped_stays_varints(
    module: Any, records: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A malformed line (left to Python, then skipped) leaves no text to insert: its batch's
    ids stay varints, not decoded to int64."""
    from feedgpu import read_manifest
    from feedgpu.converters.text.convert import TextOptions, convert_text

    src, vocab = word_files(tmp_path, 5, 400, files=1)
    part = src / "part-0.jsonl"
    lines = part.read_text().splitlines()
    lines[100] = "{broken"
    part.write_text("\n".join(lines) + "\n")
    kinds = framing_kinds(monkeypatch)
    convert_text(str(src), str(tmp_path / "out"), TextOptions(tokenizer=str(vocab)), quiet=True)
    assert kinds and set(kinds) == {"varints"}, kinds
    assert read_manifest(str(tmp_path / "out")).num_skipped == 1
