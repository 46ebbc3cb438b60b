"""Record indexes beside the shards (DALI, PyTorch `tfrecord`), checked against a parse of each
shard written here, not with feedgpu's own record reader."""

from __future__ import annotations

import io
import json
import random
import struct
from pathlib import Path

import google_crc32c
import pytest

import feedgpu
from feedgpu.cli import main
from feedgpu.format.index import IndexingWriter
from feedgpu.format.records import decode_example, frame_records, read_records


def _masked(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def parse_offsets(shard: Path) -> list[tuple[int, int]]:
    """Each record's (offset, framed length), both CRCs checked: TFRecord's framing, by hand."""
    data, out, at = shard.read_bytes(), [], 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        assert struct.unpack_from("<I", data, at + 8)[0] == _masked(data[at : at + 8])
        body = data[at + 12 : at + 12 + length]
        assert struct.unpack_from("<I", data, at + 12 + length)[0] == _masked(body)
        out.append((at, 16 + length))
        at += 16 + length
    assert at == len(data)
    return out


def check_indexes(out: Path) -> int:
    """Every shard's index equals the hand parse; returns the shards checked."""
    manifest = json.loads((out / "feedgpu.json").read_text())
    shards = [s for split in manifest["splits"].values() for s in split["shards"]]
    for shard in shards:
        assert shard["index"] == shard["file"] + ".idx"
        lines = (out / shard["index"]).read_text().splitlines()
        listed = [tuple(map(int, line.split())) for line in lines]
        assert listed == parse_offsets(out / shard["file"]), shard["file"]
        assert len(listed) == shard.get("num_records", shard["num_examples"])  # one per record
    return len(shards)


def test_converting_with_index_writes_one_per_shard_and_verify_checks_them(
    tmp_path: Path, image_folder: Path, text_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    images = tmp_path / "images"
    feedgpu.convert_images(
        str(image_folder), str(images), feedgpu.ImageOptions(num_shards=3, index=True), quiet=True
    )
    assert check_indexes(images) >= 3
    text = tmp_path / "text"
    options = feedgpu.TextOptions(tokenizer="train:wordpiece:300", num_shards=2, index=True)
    feedgpu.convert_text(str(text_folder), str(text), options, quiet=True)
    assert check_indexes(text) >= 2
    assert feedgpu.verify_dataset(str(images)).ok and feedgpu.verify_dataset(str(text)).ok
    # A wrong entry and a missing index are findings of verify.
    index = next(images.glob("*.idx"))
    lines = index.read_text().splitlines()
    lines[1] = "5 7"
    index.write_text("\n".join(lines) + "\n")
    problems = feedgpu.verify_dataset(str(images)).problems
    assert any(p.startswith(index.name) and "entry 1 says (5, 7)" in p for p in problems)
    index.unlink()
    assert main(["verify", str(images)]) == 1
    assert "index missing (feedgpu index OUT writes it)" in capsys.readouterr().out


def test_feedgpu_index_adds_them_to_an_existing_dataset(
    tmp_path: Path, image_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "data"
    args = ["--quiet", "--num-shards", "3"]
    assert main(["convert", "images", str(image_folder), str(out), *args]) == 0
    assert not list(out.glob("*.idx"))
    # Off, it is not recorded: datasets converted before --index keep their fingerprint.
    assert "index" not in json.loads((out / "feedgpu.json").read_text())["options"]
    assert main(["index", str(out)]) == 0
    assert "3 index files written" in capsys.readouterr().out
    assert check_indexes(out) > 0 and feedgpu.verify_dataset(str(out)).ok
    assert main(["index", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["written"] == []  # all there already
    # Converting again with --index: the same dataset otherwise, so the message says how.
    again = main(["convert", "images", str(image_folder), str(out), *args, "--index"])
    assert again == 1 and "feedgpu index" in capsys.readouterr().err


def test_the_index_follows_records_however_the_bytes_are_cut() -> None:
    rng = random.Random(0)
    records = [rng.randbytes(rng.randrange(0, 40)) for _ in range(300)]
    blob = frame_records(records)
    expected, at = [], 0
    for record in records:
        expected.append((at, len(record) + 16))
        at += len(record) + 16
    for _ in range(50):
        out = io.BytesIO()
        writer = IndexingWriter(out)
        i = 0
        while i < len(blob):  # pieces of every size, headers cut anywhere
            n = rng.choice([1, 2, 3, 5, 7, 11, 13, 50, 1000])
            writer.write(blob[i : i + n])
            i += n
        assert writer.entries == expected and out.getvalue() == blob
    writer = IndexingWriter(io.BytesIO())
    writer.write(blob[:30])
    with pytest.raises(ValueError, match="inside a record"):
        writer.index_bytes()


PYTORCH_READER = """
import json, sys
import numpy as np
from tfrecord.reader import tfrecord_loader
out, description = sys.argv[1], json.loads(sys.argv[2])
manifest = json.load(open(f"{out}/feedgpu.json"))
records = {}
for split in manifest["splits"].values():
    for shard in split["shards"]:
        path, index = f"{out}/{shard['file']}", f"{out}/{shard['index']}"
        halves = [tfrecord_loader(path, index, description, shard=(k, 2)) for k in range(2)]
        records[shard["file"]] = [
            {k: [bytes(v).decode() if description[k] == "byte" else int(v)
                 for v in np.atleast_1d(r[k])] for k in description}  # one bytes value: not a list
            for half in halves for r in half
        ]
print(json.dumps(records))
"""


def pytorch_records(out: Path, description: dict[str, str]) -> dict[str, list[dict]]:
    """Each shard's records as the `tfrecord` package (PyPI) reads them, in a process without
    TensorFlow, as a PyTorch DataLoader's workers would: each shard in two halves cut by its
    index. Values as lists (bytes decoded)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", PYTORCH_READER, str(out), json.dumps(description)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_pytorch_tfrecord_reader_gets_documents_out_of_blocks(
    tmp_path: Path, text_folder: Path
) -> None:
    """The README's recipe for text records holding blocks of documents, read by the
    `tfrecord` package: each block split at its lengths."""
    import numpy as np
    from conftest import shard_examples

    out = tmp_path / "text"
    options = feedgpu.TextOptions(
        tokenizer="train:wordpiece:300", num_shards=2, index=True, docs_per_record=3
    )
    feedgpu.convert_text(str(text_folder), str(out), options, quiet=True)
    manifest = feedgpu.read_manifest(str(out))
    train = manifest.split("train")  # imdb/train: 60 documents, imdb/test: 20
    assert train.num_examples == 60 and sum(s.num_records for s in train.shards) == 20
    description = {"input_ids": "int", "length": "int", "doc_id": "byte"}
    docs = {}
    for blocks in pytorch_records(out, description).values():
        for block in blocks:
            ids = np.split(np.asarray(block["input_ids"]), np.cumsum(block["length"])[:-1])
            docs.update(zip(block["doc_id"], (doc.tolist() for doc in ids), strict=True))
    ours = {ex["doc_id"][0].decode(): ex["input_ids"] for ex in shard_examples(out)}
    assert docs == ours and len(ours) == 80


def test_the_pytorch_tfrecord_reader_splits_shards_by_their_index(
    tmp_path: Path, image_folder: Path
) -> None:
    """The `tfrecord` package reads every record once, in order, across a shard's halves."""
    out = tmp_path / "data"
    feedgpu.convert_images(
        str(image_folder), str(out), feedgpu.ImageOptions(num_shards=2, index=True), quiet=True
    )
    rows = pytorch_records(out, {"path": "byte", "label": "int"})
    manifest = feedgpu.read_manifest(str(out))
    for split in manifest.splits.values():
        for shard in split.shards:
            with open(out / shard.file, "rb") as f:
                examples = [decode_example(r) for r in read_records(f)]
            ours = [(ex["path"][0].decode(), ex["label"][0]) for ex in examples]
            assert [(r["path"][0], r["label"][0]) for r in rows[shard.file]] == ours
