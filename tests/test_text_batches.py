"""Batches for the tokenizer threads: filled by lines, documents or bytes, order kept."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

from feedgpu.converters.listing import SourceFile
from feedgpu.converters.text import batches as text_batches
from feedgpu.converters.text import sources as text_sources
from feedgpu.converters.text.batches import Labels, iter_batches
from feedgpu.converters.text.options import TextSource


def test_batches_fill_by_lines_or_bytes_and_keep_every_document(
    tmp_path: Path, monkeypatch
) -> None:
    rng = random.Random(2)
    sizes = [[5, 40]] * 800 + [[5, 40, 300, 2500]] * 1200  # short, then mixed documents
    texts = ["w" * rng.choice(size) + f" {i}" for i, size in enumerate(sizes)]
    lines = [json.dumps({"text": t}) for t in texts]
    lines[700] = "{not json"  # skipped by the tokenizer thread that parses its batch
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(text_batches, "BATCH_DOCS", 64)
    monkeypatch.setattr(text_batches, "BATCH_CHARS", 6000)
    monkeypatch.setattr(text_sources, "BLOCK_LINES", 16)  # blocks of lines, joined by batches
    monkeypatch.setattr(text_sources, "BLOCK_BYTES", 1500)
    source = TextSource(SourceFile("a.jsonl", str(tmp_path / "a.jsonl"), 0, 0), None, None)
    skips: list = []
    labels = Labels({"train": 1.0}, {})
    batches = list(iter_batches([source], text_batches.ReadOptions(), labels, skips, False))
    assert not skips and all(len(b) == 0 for b in batches)  # lines, not parsed yet
    sizes = []
    for batch, after in itertools.pairwise(batches):  # full: the next block would not fit
        assert (batch.lines <= 64 and batch.chars <= 6000) or len(batch.raw) == 1
        block = after.raw[0][0]
        assert batch.lines + len(block.lines) > 64 or batch.chars + block.size > 6000
        sizes.append(batch.lines)
    assert 64 in sizes and min(sizes) < 64
    for batch in batches:
        skips += batch.parse(text_batches.ReadOptions(), labels.fractions, False)
    assert [t for b in batches for t in b.texts] == texts[:700] + texts[701:]
    assert [s.path for s in skips] == ["a.jsonl:701"]
    assert [b.splits for b in batches] == [["train"] * len(b) for b in batches]


def test_unlabelled_lines_and_documents_never_share_a_batch(tmp_path: Path) -> None:
    """A .txt file between JSONL files: its documents are batched apart, in reading order,
    and documents of a hash-split corpus get their splits on the parsing thread."""
    (tmp_path / "a.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n')
    (tmp_path / "b.txt").write_text("three\n")
    (tmp_path / "c.jsonl").write_text('{"text": "four"}\n')
    sources = [
        TextSource(SourceFile(name, str(tmp_path / name), 0, 0), None, None)
        for name in ("a.jsonl", "b.txt", "c.jsonl")
    ]
    fractions = {"train": 0.5, "test": 0.5}
    read = text_batches.ReadOptions(doc_per_line=True)
    batches = list(iter_batches(sources, read, Labels(fractions, {}), [], False))
    assert [bool(b.raw) for b in batches] == [True, False, True]
    for batch in batches:
        batch.parse(read, fractions, False)
    assert [b.texts for b in batches] == [["one", "two"], ["three"], ["four"]]
    expected = [text_batches.hash_split(i, fractions) for b in batches for i in b.doc_ids]
    assert [s for b in batches for s in b.splits] == expected
