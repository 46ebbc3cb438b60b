"""A batch of JSON lines' documents framed in one compiled call (`framed`, `_shard_records.c`):
the bytes, shards and statistics of the separate steps it replaces, and refusals of what does
not add up; a conversion through it is the same bytes as one without the compiled steps."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from feedgpu.converters.text.native import NO_NATIVE_ENV


def _expected(
    builder: Any,
    values: Any,
    lengths: Any,
    runs: list[tuple[str, Any]],
    key: Any,
    shards: tuple[int, int],
) -> dict[str, Any]:
    """What the separate steps make of a batch, without any compiled step: the examples
    (ExampleBuilder's graph), each record's shard (TensorFlow's hash), the framed groups."""
    from feedgpu.converters.text.examples import route
    from feedgpu.format.records import frame_records

    names = [f"{prefix}{n}" for prefix, lines in runs for n in lines.tolist()]
    built = builder(values, lengths, names, None, ["train"] * len(names))
    firsts = built.blocks.firsts.tolist()
    first, count = shards
    shard = (route([names[i] for i in firsts], key) % np.uint64(count)).astype(np.int64) + first
    groups = {}
    for s in sorted(set(shard.tolist())):
        group = [r for r, at in zip(built.records, shard.tolist(), strict=True) if at == s]
        groups[s] = (frame_records(group), len(group))
    return {
        "built": built,
        "groups": groups,
        "doc_shards": np.repeat(shard, built.blocks.sizes).tolist(),
    }


@pytest.mark.parametrize("per_record", [None, 1, 3])
@pytest.mark.parametrize("max_length", [None, 9])
@pytest.mark.parametrize("shards", [(0, 1), (4, 5)])
def test_framed_batch_is_the_separate_steps_bytes(
    records: Any,
    per_record: int | None,
    max_length: int | None,
    shards: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runs of documents (non-ASCII prefixes, large and small line numbers, empty documents,
    unknown ids in the truncated part too, ids of one to three varint bytes), in blocks by
    size (long enough to cut windows and runs of RECORD_DOCS), a count each or one each."""
    from feedgpu.converters.text import blocks
    from feedgpu.converters.text.examples import ExampleBuilder, route_key
    from feedgpu.converters.text.framed import shard_records

    monkeypatch.setattr(blocks, "RECORD_DOCS", 7)  # both: the step is given the module's
    monkeypatch.setattr("feedgpu.converters.text.framed.RECORD_DOCS", 7)
    monkeypatch.setattr("feedgpu.converters.text.framed.RECORD_IDS", 64)
    monkeypatch.setattr(blocks, "RECORD_IDS", 64)
    rng = np.random.default_rng(11)
    lengths = rng.integers(0, 30, 400)
    lengths[::11] = 0
    values = rng.integers(0, 40000, int(lengths.sum()))
    values[::5] = 1  # the unknown id
    runs = [
        ("dir/é.jsonl:", np.arange(0, 150, dtype=np.int64)),
        ("b.jsonl:", np.arange(10**12, 10**12 + 50, dtype=np.int64)),
        ("c.jsonl:", np.sort(rng.choice(10**6, 200, replace=False)).astype(np.int64)),
    ]
    key = route_key(3)
    builder = ExampleBuilder([101, 7], [102], max_length, 1, False, per_record)
    framed = shard_records(builder, values, lengths, runs, key, shards)
    assert framed is not None
    monkeypatch.setenv(NO_NATIVE_ENV, "1")
    want = _expected(builder, values, lengths, runs, key, shards)
    built = want["built"]
    start = 0
    for shard, end, count in framed.shards:
        assert (framed.data[start:end], count) == want["groups"].pop(shard)
        start = end
    assert not want["groups"] and start == len(framed.data)
    assert framed.data[slice(*framed.first)] == built.records[0]
    assert framed.doc_shards.tolist() == want["doc_shards"]
    assert framed.full.tolist() == built.full_lengths.tolist()
    assert framed.unknown.tolist() == built.unknown.tolist()
    assert framed.stored.tolist() == built.stored.tolist()
    assert sum(framed.unknown) > 0


def test_framed_step_refuses_what_does_not_add_up(records: Any) -> None:
    """Lengths that do not cover the ids (or wrap around), runs or numbers or prefixes that do
    not cover the documents, a prefix not str, no shard: a clear error, never a read past the
    end."""
    ids, lengths = np.arange(6, dtype=np.int64), np.array([2, 4], np.int64)
    numbers, runs, specials = (
        np.array([1, 2], np.int64),
        np.array([2], np.int64),
        np.zeros(0, np.int64),
    )

    def call(**change: Any) -> Any:
        args = {
            "ids": ids,
            "lengths": lengths,
            "numbers": numbers,
            "prefixes": ["a:"],
            "runs": runs,
            "before": specials,
            "after": specials,
            "budget": -1,
            "unk": -1,
            "per_record": 0,
            "record_ids": 4096,
            "record_docs": 256,
            "k0": 1,
            "k1": 2,
            "count": 3,
        }
        args.update(change)
        return records.shard_records(*args.values())

    assert len(call()[0]) > 0
    cases = [
        ({"ids": ids[:5]}, ValueError),
        ({"lengths": np.array([-1, 7], np.int64)}, ValueError),
        (  # lengths whose sum wraps around to the ids' count (2**64 + 6)
            {
                "lengths": np.array([2**62] * 4 + [6], np.int64),
                "numbers": np.zeros(5, np.int64),
                "runs": np.array([5], np.int64),
            },
            ValueError,
        ),
        ({"numbers": numbers[:1]}, ValueError),
        ({"runs": np.array([1], np.int64)}, ValueError),
        ({"runs": np.array([-1, 3], np.int64), "prefixes": ["a", "b"]}, ValueError),
        ({"prefixes": ["a:", "b:"]}, ValueError),
        ({"prefixes": [b"a:"]}, TypeError),
        ({"count": 0}, ValueError),
        ({"count": 2**61}, MemoryError),  # its per-shard arrays' size would wrap around
        ({"budget": -2}, ValueError),
        # runs whose sum wraps around to the documents' count
        ({"runs": np.array([1, 2**63 - 1, 2**63 - 1, 3]), "prefixes": list("abcd")}, ValueError),
        ({"record_docs": 0}, ValueError),
        ({"lengths": lengths.astype(np.int32)}, ValueError),
    ]
    for change, error in cases:
        with pytest.raises(error):
            call(**change)


@pytest.mark.parametrize(
    "options",
    [{}, {"docs_per_record": 3, "max_length": 12}, {"docs_per_record": 1}],
    ids=["auto", "blocks-of-3-truncated", "one-each"],
)
def test_conversion_through_the_framed_step_is_the_same_bytes(
    records: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    """Two JSONL files (one with a line the step leaves to Python: an escape plain text cannot
    hold) converted with the compiled steps, which frame every batch, and without them: the
    same shards and manifest statistics."""
    from feedgpu import read_manifest
    from feedgpu.converters.text import batch_records
    from feedgpu.converters.text.convert import TextOptions, convert_text

    rng = random.Random(2)
    words = ["alpha", "beta", "gamma", "delta", "zzqx", "naïve", "the", "of"]
    (tmp_path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words[:4], "the", "of", "naive"])
        + "\n"
    )
    src = tmp_path / "src"
    src.mkdir()
    for name in ("a", "b"):
        lines = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 30))) for _ in range(500)]
        lines[7] = "form\ffeed"
        (src / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in lines))
    framed: list[Any] = []
    real = batch_records.framed_batch
    monkeypatch.setattr(
        batch_records, "framed_batch", lambda *a: framed.append(real(*a)) or framed[-1]
    )
    outs = []
    for flag in ("0", "1"):
        monkeypatch.setenv(NO_NATIVE_ENV, flag)
        out = tmp_path / f"out{flag}"
        convert_text(
            str(src), str(out), TextOptions(tokenizer=str(tmp_path / "vocab.txt"), **options)
        )
        outs.append(out)
        if flag == "0":
            assert framed and all(f is not None for f in framed)
    names = sorted(p.name for p in outs[0].glob("*.tfrecord-*"))
    assert names
    for name in names:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    stats = [read_manifest(str(out)).to_json()["text"] for out in outs]
    assert stats[0] == stats[1]
    assert stats[0]["unknown_rate"] > 0


def test_framed_batches_reach_a_gfile_output(
    records: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Into a gfile-only file system (TensorFlow's ram://, standing in for gs://: piece
    folders, files that take bytes only), framed batches make the same shards as on disk."""
    import tensorflow as tf

    from feedgpu.converters.text import batch_records
    from feedgpu.converters.text.convert import TextOptions, convert_text

    rng = random.Random(8)
    words = ["alpha", "beta", "gamma", "delta", "the", "of"]
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words]))
    src = tmp_path / "src"
    src.mkdir()
    lines = [" ".join(rng.choices(words, k=rng.randint(1, 20))) for _ in range(3000)]
    (src / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in lines))
    options = TextOptions(tokenizer=str(tmp_path / "vocab.txt"), num_shards=3, name="c")
    convert_text(str(src), str(tmp_path / "disk"), options, quiet=True)
    framed: list[Any] = []
    real = batch_records.framed_batch
    monkeypatch.setattr(
        batch_records, "framed_batch", lambda *a: framed.append(real(*a)) or framed[-1]
    )
    remote = "ram://feedgpu-framed/out"
    convert_text(str(src), remote, options, quiet=True)
    assert framed and all(f is not None for f in framed)  # every batch by the framed step
    names = sorted(p.name for p in (tmp_path / "disk").glob("*.tfrecord-*"))
    assert len(names) == 3
    for name in names:
        with tf.io.gfile.GFile(f"{remote}/{name}", "rb") as f:
            assert f.read() == (tmp_path / "disk" / name).read_bytes(), name
