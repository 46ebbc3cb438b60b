"""Small literal cases: exact packed ids, segments and positions; the pad id a tokenizer implies,
in the shards and in the pipeline's batches; bucket boundaries for tiny length counts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import shard_examples

import feedgpu
from feedgpu import DatasetError, TextOptions, UsageError, convert_text, read_manifest
from feedgpu.pipeline.buckets import choose_boundaries, padding_waste

ROBERTA_VOCAB = ["<s>", "<pad>", "</s>", "<unk>", "the", "cat", "sat", "on", "mat", "a", "dog"]
DOCS = ["the cat sat", "a dog", "the mat on the mat", "cat"]


def word_level_tokenizer(path: Path, vocab: list[str], bos: str | None, eos: str) -> Path:
    """A tokenizer.json: whitespace words, `bos $A eos` around each document."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    unk = "<unk>" if "<unk>" in vocab else vocab[-1]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    template = f"{bos} $A {eos}" if bos else f"$A {eos}"
    specials = [(t, vocab.index(t)) for t in (bos, eos) if t]
    tok.post_processor = processors.TemplateProcessing(single=template, special_tokens=specials)
    tok.save(str(path))
    return path


def corpus(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "docs.txt").write_text("\n".join(DOCS) + "\n")
    return src


def test_packing_three_documents_and_a_short_one_exactly(tmp_path: Path) -> None:
    tokenizer = word_level_tokenizer(tmp_path / "tokenizer.json", ROBERTA_VOCAB, "<s>", "</s>")
    out = tmp_path / "packed"
    options = TextOptions(tokenizer=str(tokenizer), doc_per_line=True, pack=8, num_shards=1)
    convert_text(str(corpus(tmp_path)), str(out), options, quiet=True)
    packed = shard_examples(out)
    # <s>=0 the=4 cat=5 sat=6 </s>=2 | <s> a=9 dog=10 (its </s> opens the next sequence) ...
    assert [p["input_ids"] for p in packed] == [
        [0, 4, 5, 6, 2, 0, 9, 10],
        [2, 0, 4, 8, 7, 4, 8, 2],
        [0, 5, 2, 1, 1, 1, 1, 1],  # padded with <pad> = 1, not 0 (<s>)
    ]
    assert [p["segment_ids"] for p in packed] == [
        [1, 1, 1, 1, 1, 2, 2, 2],
        [1, 2, 2, 2, 2, 2, 2, 2],
        [1, 1, 1, 0, 0, 0, 0, 0],
    ]
    assert [p["positions"] for p in packed] == [
        [0, 1, 2, 3, 4, 0, 1, 2],
        [0, 0, 1, 2, 3, 4, 5, 6],
        [0, 1, 2, 0, 0, 0, 0, 0],
    ]
    manifest = read_manifest(str(out))
    assert manifest.tokenizer is not None
    assert (manifest.tokenizer.pad_id, manifest.tokenizer.pad_token) == (1, "<pad>")

    spec = feedgpu.PipelineSpec.for_dataset(str(out), batch_size=3)
    assert spec.text_mode == "packed" and spec.pad_id == 1
    batch = next(iter(feedgpu.build_pipeline(spec)))
    ids, mask = batch["input_ids"].numpy(), batch["attention_mask"].numpy()
    assert ids.tolist() == [p["input_ids"] for p in packed]
    assert (mask == (batch["segment_ids"].numpy() > 0)).all()
    assert mask[2].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]


def test_pipeline_pads_with_the_tokenizers_pad_id_and_masks_exactly_there(tmp_path: Path) -> None:
    tokenizer = word_level_tokenizer(tmp_path / "tokenizer.json", ROBERTA_VOCAB, "<s>", "</s>")
    out = tmp_path / "plain"
    options = TextOptions(tokenizer=str(tokenizer), doc_per_line=True, num_shards=1)
    convert_text(str(corpus(tmp_path)), str(out), options, quiet=True)
    spec = feedgpu.PipelineSpec.for_dataset(str(out), batch_size=4, max_length=8, text_mode="pad")
    assert spec.pad_id == 1 and dict(spec.reasons)["pad_id"] == "the tokenizer's pad token"
    batch = next(iter(feedgpu.build_pipeline(spec)))
    ids, mask = batch["input_ids"].numpy(), batch["attention_mask"].numpy()
    lengths = sorted(int(n) for n in mask.sum(axis=1))
    assert lengths == [3, 4, 5, 7]  # <s> ... </s> around 1, 2, 3 and 5 words
    assert (ids[mask == 0] == 1).all() and ids.shape == (4, 8)
    assert not (ids[mask == 1] == 1).any()  # no real position holds the pad id
    assert (mask == (np.arange(8)[None, :] < mask.sum(axis=1, keepdims=True))).all()


def test_a_tokenizer_without_pad_token_pads_with_its_end_of_text_token(tmp_path: Path) -> None:
    vocab = ["the", "cat", "sat", "on", "mat", "a", "dog", "<unk>", "<|endoftext|>"]
    tokenizer = word_level_tokenizer(tmp_path / "tokenizer.json", vocab, None, "<|endoftext|>")
    out = tmp_path / "gpt"
    options = TextOptions(tokenizer=str(tokenizer), doc_per_line=True, pack=8, num_shards=1)
    convert_text(str(corpus(tmp_path)), str(out), options, quiet=True)
    info = read_manifest(str(out)).tokenizer
    assert info is not None and (info.pad_id, info.pad_token) == (8, "<|endoftext|>")
    assert "end-of-text" in info.pad_choice
    last = shard_examples(out)[-1]
    padding = [i for i, s in zip(last["input_ids"], last["segment_ids"], strict=True) if s == 0]
    assert padding and set(padding) == {8}  # not 0, which is "the" here

    explicit = TextOptions(tokenizer=str(tokenizer), doc_per_line=True, pack=8, pad_id=7)
    convert_text(str(corpus(tmp_path)), str(tmp_path / "explicit"), explicit, quiet=True)
    info = read_manifest(str(tmp_path / "explicit")).tokenizer
    assert info is not None and (info.pad_id, info.pad_choice) == (7, "--pad-id")
    with pytest.raises(UsageError, match=r"--pad-id 99: must be an id of the vocabulary \(0-8\)"):
        convert_text(
            str(corpus(tmp_path)),
            str(tmp_path / "bad"),
            TextOptions(tokenizer=str(tokenizer), pad_id=99),
            quiet=True,
        )


def test_format_1_manifests_are_read_with_the_pad_id_their_packer_used(tmp_path: Path) -> None:
    # tests/golden/format1-packed: a format-1 manifest (no pad fields) of text packed into 8
    # ids with a RoBERTa-like vocabulary ("<pad>" is id 1), and the tokenizer.json beside it.
    out = tmp_path / "old"
    shutil.copytree(Path(__file__).parent / "golden" / "format1-packed", out)
    path = out / "feedgpu.json"
    manifest = read_manifest(str(out))
    assert manifest.tokenizer is not None and manifest.tokenizer.pad_id == 1
    assert feedgpu.PipelineSpec.for_dataset(str(out)).pad_id == 1

    data = json.loads(path.read_text())
    data["format_version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(DatasetError, match=r"written by a newer feedgpu \(manifest format 99"):
        read_manifest(str(out))


@pytest.mark.parametrize("name", ["image", "text", "packed"])
def test_golden_format_2_manifests_are_read(tmp_path: Path, name: str) -> None:
    golden = Path(__file__).parent / "golden" / f"{name}.feedgpu.json"
    (tmp_path / "feedgpu.json").write_bytes(golden.read_bytes())
    manifest = read_manifest(str(tmp_path))
    assert manifest.kind == ("image" if name == "image" else "text")
    assert manifest.labelled == (name != "packed")
    assert manifest.pack_length == (8 if name == "packed" else None)
    assert manifest.split("train").num_examples == 6


def test_bucket_boundaries_for_tiny_length_counts() -> None:
    counts = [[3, 10], [5, 10], [17, 1]]  # rounded up to multiples of 8: 8 (20 rows), 24 (1)
    assert choose_boundaries(counts, 32) == [8, 24]
    assert padding_waste(counts, [8, 24]) == pytest.approx(1 - (30 + 50 + 17) / (20 * 8 + 24))
    assert choose_boundaries(counts, 16) == [8, 16]  # capped at max_length
    assert choose_boundaries([[8, 5], [16, 5]], 64, target_waste=0.5) == [16]  # one is enough
