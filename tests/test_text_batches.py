"""Batches for the tokenizer threads: filled by documents or by characters, order kept."""

from __future__ import annotations

import json
import random
from pathlib import Path

from feedgpu.converters.listing import SourceFile
from feedgpu.converters.text import batches as text_batches
from feedgpu.converters.text.batches import Labels, iter_batches
from feedgpu.converters.text.options import TextSource


def test_batches_fill_by_characters_or_documents_and_keep_every_document(
    tmp_path: Path, monkeypatch
) -> None:
    rng = random.Random(2)
    sizes = [[5, 40]] * 800 + [[5, 40, 300, 2500]] * 1200  # short, then mixed documents
    texts = ["w" * rng.choice(size) + f" {i}" for i, size in enumerate(sizes)]
    lines = [json.dumps({"text": t}) for t in texts]
    lines[700] = "{not json"  # a block read line by line: documents join one at a time
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(text_batches, "BATCH_DOCS", 64)
    monkeypatch.setattr(text_batches, "BATCH_CHARS", 6000)
    source = TextSource(SourceFile("a.jsonl", str(tmp_path / "a.jsonl"), 0, 0), None, None)
    skips: list = []
    labels = Labels({"train": 1.0}, {})
    batches = list(iter_batches([source], text_batches.ReadOptions(), labels, skips, False))
    assert [t for b in batches for t in b.texts] == texts[:700] + texts[701:]
    assert len(skips) == 1
    for batch in batches[:-1]:  # full: by count, or by characters at its last document
        assert batch.chars == sum(map(len, batch.texts))
        by_chars = batch.chars >= 6000 > batch.chars - len(batch.texts[-1])
        assert len(batch) == 64 or by_chars, (len(batch), batch.chars)
    assert any(len(b) == 64 for b in batches) and any(len(b) < 64 for b in batches[:-1])
