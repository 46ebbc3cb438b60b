"""Records holding blocks of documents, read as elements of exactly `block` documents."""

from __future__ import annotations

import pytest
import tensorflow as tf

from feedgpu.pipeline.document_blocks import documents_in_blocks


def _parsed(blocks: list[list[list[int]]], per_batch: int) -> tf.data.Dataset:
    """Batches of block records as parse_example gives them: every feature a list a record."""
    rows = {
        "input_ids": [[t for doc in block for t in doc] for block in blocks],
        "length": [[len(doc) for doc in block] for block in blocks],
        "doc_id": [
            [f"d{sum(map(len, blocks[:i])) + j}".encode() for j in range(len(block))]
            for i, block in enumerate(blocks)
        ],
    }
    ragged = {
        k: tf.ragged.constant(v, dtype=tf.string if k == "doc_id" else tf.int64)
        for k, v in rows.items()
    }
    return tf.data.Dataset.from_tensor_slices(ragged).batch(per_batch)


@pytest.mark.parametrize("per_batch", [1, 2, 5])
def test_elements_hold_exactly_block_documents_in_order(per_batch: int) -> None:
    docs = [[i] * (1 + i % 4) for i in range(23)]
    sizes = [3, 1, 5, 2, 7, 1, 4]  # documents a record
    blocks, at = [], 0
    for size in sizes:
        blocks.append(docs[at : at + size])
        at += size
    elements = list(documents_in_blocks(_parsed(blocks, per_batch), block=4))
    assert [int(tf.size(e["length"])) for e in elements] == [4, 4, 4, 4, 4, 3]
    got = [row for e in elements for row in e["input_ids"].to_list()]
    assert got == docs
    assert [d.decode() for e in elements for d in e["doc_id"].numpy()] == [
        f"d{i}" for i in range(23)
    ]
    flat = list(documents_in_blocks(_parsed(blocks, per_batch), flat=True, block=4))
    assert [len(e["input_ids"]) for e in flat] == [int(tf.reduce_sum(e["length"])) for e in flat]
    assert [t for e in flat for t in e["input_ids"].numpy()] == [t for d in docs for t in d]


def test_a_record_whose_lengths_do_not_add_up_is_an_error() -> None:
    bad = {
        "input_ids": tf.ragged.constant([[1, 2, 3]], dtype=tf.int64),
        "length": tf.ragged.constant([[1, 1]], dtype=tf.int64),
    }
    parsed = tf.data.Dataset.from_tensor_slices(bad).batch(1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="do not add up to its ids"):
        list(documents_in_blocks(parsed, block=4))


def test_verify_decode_counts_each_blocks_documents(tmp_path, text_folder) -> None:
    """`verify --decode` splits every block: lengths that do not add up, and a shard whose
    documents are not the manifest's count, are findings."""
    import json

    import feedgpu
    from feedgpu.format.records import encode_example, frame_records

    out = tmp_path / "text"
    options = feedgpu.TextOptions(tokenizer="train:wordpiece:300", docs_per_record=3)
    feedgpu.convert_text(str(text_folder), str(out), options, quiet=True)
    assert feedgpu.verify_dataset(str(out), decode=True).ok
    path = out / "feedgpu.json"
    data = json.loads(path.read_text())
    shard = data["splits"]["train"]["shards"][0]
    shard["num_examples"] += 1
    path.write_text(json.dumps(data))
    problems = feedgpu.verify_dataset(str(out), decode=True).problems
    assert problems == [
        f"{shard['file']}: {shard['num_examples'] - 1} documents in its blocks, manifest says "
        f"{shard['num_examples']}"
    ]
    assert feedgpu.verify_dataset(str(out)).ok  # without --decode, records are not opened
    shard["num_examples"] -= 1
    shard["num_records"] += 1
    path.write_text(json.dumps(data))
    bad = {"doc_id": [b"x", b"y"], "input_ids": [1, 2, 3], "length": [1, 1]}
    with open(out / shard["file"], "ab") as f:
        f.write(frame_records([encode_example(bad)]))
    problems = feedgpu.verify_dataset(str(out), decode=True).problems
    assert any("a block's lengths add up to 2, its ids are 3" in p for p in problems)


def test_ignore_errors_readers_skip_a_block_whose_lengths_do_not_add_up(
    tmp_path, text_folder
) -> None:
    import feedgpu
    from feedgpu.format.records import encode_example, frame_records

    out = tmp_path / "text"
    options = feedgpu.TextOptions(tokenizer="train:wordpiece:300", docs_per_record=3)
    feedgpu.convert_text(str(text_folder), str(out), options, quiet=True)
    spec = feedgpu.PipelineSpec.for_dataset(str(out), batch_size=4, ignore_errors=True)
    good = sorted(ex["doc_id"].numpy() for ex in feedgpu.read_dataset(spec))
    assert len(good) == 60
    bad = {"doc_id": [b"x", b"y"], "input_ids": [1, 2, 3], "length": [1, 1]}
    shard = next(out.glob("*-train.tfrecord-*"))
    with open(shard, "ab") as f:
        f.write(frame_records([encode_example(bad)]))
    assert sorted(ex["doc_id"].numpy() for ex in feedgpu.read_dataset(spec)) == good
    strict = spec.with_changes(ignore_errors=False)
    with pytest.raises(tf.errors.InvalidArgumentError, match="do not add up to its ids"):
        list(feedgpu.read_dataset(strict))
