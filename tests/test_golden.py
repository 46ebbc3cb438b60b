"""Golden bytes: one small image shard and small text shards, hashed; and their manifests,
committed in tests/golden/ (paths as <TMP>), equal field for field.

The inputs are fixed bytes (three JPEGs written out here, a WordPiece vocab.txt and literal
documents), so no encoder or tokenizer-training version can move the hashes: a change here is
a change of the on-disk format, which readers of existing datasets would feel. Update a hash
only on purpose, with a note on what changed in the bytes and why.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from feedgpu import ImageOptions, TextOptions, convert_images, convert_text

# Three tiny baseline JPEGs (16x12, 12x16, 20x15), as Pillow wrote them once: stored as is.
_JPEGS_B64 = (
    (
        "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdASFxOQERX"
        "RTc4UG1RV19iZ2hnPk1xeXBkeFxlZ2P/2wBDARESEhgVGC8aGi9jQjhCY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2Nj"
        "Y2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2P/wAARCAAMABADASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAA"
        "AAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAk"
        "M2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKT"
        "lJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QA"
        "HwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdh"
        "cRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hp"
        "anN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk"
        "5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwBkVttUZFak8VtHFH5Lcn3zn61DAoMRJ7GqyffX61vRpezk432O"
        "DHVfig1e/wCB/9k="
    ),
    (
        "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdASFxOQERX"
        "RTc4UG1RV19iZ2hnPk1xeXBkeFxlZ2P/2wBDARESEhgVGC8aGi9jQjhCY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2Nj"
        "Y2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2P/wAARCAAQAAwDASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAA"
        "AAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAk"
        "M2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKT"
        "lJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QA"
        "HwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdh"
        "cRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hp"
        "anN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk"
        "5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwBtxGr3bOB8pPzDPU96kflicUs+xQ0rPheWJxnFUF1a1cElmT2Z"
        "T/SuWEOXS1j3KdSMUlJ9D//Z"
    ),
    (
        "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdASFxOQERX"
        "RTc4UG1RV19iZ2hnPk1xeXBkeFxlZ2P/2wBDARESEhgVGC8aGi9jQjhCY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2Nj"
        "Y2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2P/wAARCAAPABQDASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAA"
        "AAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAk"
        "M2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKT"
        "lJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QA"
        "HwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdh"
        "cRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hp"
        "anN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk"
        "5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwDLS4BQcfN09M1NC+5uDxVLRIRf6hFbuSofOWHXABPH5V0er6bb"
        "2aRzQAoC20pknPBOefpXdUxcVNU3uznrQbV3sjPK564P1FFOUFhkdKKu7ObloH//2Q=="
    ),
)
JPEGS = [base64.b64decode(s) for s in _JPEGS_B64]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "dog", "sat", "on", "mat"]
VOCAB += ["a", "log", "ran", "far", "##s", "!", ".", "big", "red", "and"]
DOCUMENTS = {
    "pos/0.txt": "The cat sat on the mat.",
    "pos/1.txt": "A big red dog ran far!",
    "pos/2.txt": "cats and dogs sat on a log",
    "neg/0.txt": "the dog sat",
    "neg/1.txt": "Mats, logs and zebras.",
    "neg/2.txt": "red",
}


GOLDEN = Path(__file__).parent / "golden"


def golden_corpus(tmp_path: Path) -> tuple[Path, Path]:
    """DOCUMENTS in class folders under tmp_path/src, and VOCAB as tmp_path/vocab.txt."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    src = tmp_path / "src"
    for rel, text in DOCUMENTS.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    return src, vocab


# Fields that differ between two runs of the same conversion: inputs' mtimes, tool versions.
VOLATILE = ("fingerprint", "inputs_fingerprint", "versions")


def assert_manifest_is_golden(tmp_path: Path, name: str) -> None:
    """The fresh manifest equals the committed one but for VOLATILE fields."""
    fresh = json.loads(
        (tmp_path / "golden" / "feedgpu.json").read_text().replace(str(tmp_path), "<TMP>")
    )
    golden = json.loads((GOLDEN / f"{name}.feedgpu.json").read_text())
    for key in VOLATILE:
        fresh.pop(key), golden.pop(key)
    assert fresh == golden


def _digests(out: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        for p in sorted(out.glob("*.tfrecord-*"))
    }


def test_image_shard_bytes_are_pinned(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for i, data in enumerate(JPEGS * 2):
        folder = src / ("cat" if i % 2 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i}.jpg").write_bytes(data)
    out = tmp_path / "golden"
    convert_images(str(src), str(out), ImageOptions(num_shards=1, name="golden"), quiet=True)
    assert _digests(out) == {"golden-train.tfrecord-00000-of-00001": "10d16e2b5c72a084"}
    assert_manifest_is_golden(tmp_path, "image")


# 2026-12-01: documents routed to shards by SipHash of their ids (text_examples.route), not
# SHA-256: the same records, each shard holding a different subset.
# 2026-12-02: format 3: by default a record holds a block of documents; with
# --docs-per-record 1 the records are format 2's, byte for byte (the first case).
@pytest.mark.parametrize(
    ("extra", "expected", "golden"),
    [
        (
            {"docs_per_record": 1},
            {
                "golden-train.tfrecord-00000-of-00002": "bf8f00a8071b2a69",
                "golden-train.tfrecord-00001-of-00002": "41d864ec6487fa4b",
            },
            "text",
        ),
        (
            {"docs_per_record": 2},
            {
                "golden-train.tfrecord-00000-of-00002": "6c07143f2866238b",
                "golden-train.tfrecord-00001-of-00002": "cbaacb8abab8b295",
            },
            "blocks",
        ),
        (
            {"pack": 8},
            {
                "golden-train.tfrecord-00000-of-00002": "e6c96a367e1485d3",
                "golden-train.tfrecord-00001-of-00002": "5b1197d3fcb48a9b",
            },
            "packed",
        ),
    ],
)
def test_text_shard_bytes_are_pinned(
    tmp_path: Path, extra: dict, expected: dict, golden: str
) -> None:
    src, vocab = golden_corpus(tmp_path)
    out = tmp_path / "golden"
    options = TextOptions(
        tokenizer=str(vocab),
        folder_labels="pack" not in extra,
        num_shards=2,
        name="golden",
        **extra,
    )
    convert_text(str(src), str(out), options, quiet=True)
    assert _digests(out) == expected
    assert_manifest_is_golden(tmp_path, golden)


def _documents(out: Path) -> dict[str, tuple[list[int], int]]:
    import feedgpu

    spec = feedgpu.PipelineSpec.for_dataset(str(out), batch_size=4)
    return {
        ex["doc_id"].numpy().decode(): (ex["input_ids"].numpy().tolist(), int(ex["label"]))
        for ex in feedgpu.read_dataset(spec)
    }


def _batched_rows(out: Path) -> list[tuple[int, ...]]:
    import feedgpu

    spec = feedgpu.PipelineSpec.for_dataset(str(out), batch_size=4)
    rows = []
    for x, labels in feedgpu.build_pipeline(spec):
        for ids, mask, label in zip(x["input_ids"], x["attention_mask"], labels, strict=True):
            rows.append((*ids.numpy()[mask.numpy() > 0].tolist(), int(label)))
    return sorted(rows)


def test_format_2_text_shards_are_read_as_blocks_are(tmp_path: Path) -> None:
    """Shards written by format 2 (one document a record; tests/golden/format2-text, the
    first case's bytes above) still read, document for document as HF tokenizes them, and
    exactly as the same corpus converted into blocks does."""
    import shutil

    from tokenizers import Tokenizer

    old = tmp_path / "old"
    shutil.copytree(GOLDEN / "format2-text", old)
    hf = Tokenizer.from_file(str(old / "tokenizer.json"))
    expected = {
        rel: (hf.encode(text).ids, int(rel.startswith("pos"))) for rel, text in DOCUMENTS.items()
    }
    assert _documents(old) == expected

    src, vocab = golden_corpus(tmp_path)
    blocks = tmp_path / "blocks"
    options = TextOptions(tokenizer=str(vocab), folder_labels=True, docs_per_record=4)
    convert_text(str(src), str(blocks), options, quiet=True)
    assert _documents(blocks) == expected
    assert (
        _batched_rows(blocks)
        == _batched_rows(old)
        == sorted((*ids, label) for ids, label in expected.values())
    )
