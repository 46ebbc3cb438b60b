"""The parity sample: documents read at seeded places spread over the whole corpus, the same on
every run, never a document too large to hold."""

from __future__ import annotations

import json
from pathlib import Path

from feedgpu.converters.listing import SourceFile
from feedgpu.converters.text.options import TextSource
from feedgpu.converters.text.parity import spread_sample
from feedgpu.converters.text.sources import ReadOptions


def sources(tmp_path: Path) -> list[TextSource]:
    """Three JSONL files of 20,000 numbered documents each, one line over 1 MiB among them."""
    found = []
    for part in range(3):
        path = tmp_path / f"part-{part}.jsonl"
        lines = [json.dumps({"text": f"doc {part} {i}"}) for i in range(20_000)]
        if part == 1:
            lines[700] = json.dumps({"text": "x " * 550_000})  # 1.1 MB
        path.write_text("\n".join(lines) + "\n")
        file = SourceFile(path.name, str(path), path.stat().st_size, 0)
        found.append(TextSource(file, None, None))
    return found


def test_the_sample_is_spread_over_the_corpus_and_seeded(tmp_path: Path) -> None:
    files = sources(tmp_path)
    read = ReadOptions(max_bytes=1 << 20)
    texts = [d.text for d in spread_sample(files, read, 20_000, seed=3)]
    assert texts == [d.text for d in spread_sample(files, read, 20_000, seed=3)]  # seeded
    assert texts != [d.text for d in spread_sample(files, read, 20_000, seed=4)]
    parts = {text.split()[1] for text in texts}
    assert parts == {"0", "1", "2"}  # every file, not the corpus's start alone
    late = [int(t.split()[2]) for t in texts if t.split()[1] == "2"]
    assert max(late) > 10_000  # far into the last file too
    assert all(len(t) < 1 << 20 for t in texts)  # the long line is never a sample document
    assert 20_000 * 0.5 < sum(map(len, texts)) < 20_000 * 1.5


def test_a_line_over_the_limit_is_passed_unheld_where_the_sample_reads(tmp_path: Path) -> None:
    """Read from a place at a too-long line's start: the line is skipped, the next ones read."""
    from feedgpu.converters.text.parity import _documents_from

    path = tmp_path / "a.jsonl"
    lines = [
        json.dumps({"text": "x " * 700_000}),
        *(json.dumps({"text": f"d {i}"}) for i in range(5)),
    ]
    path.write_text("\n".join(lines) + "\n")
    source = TextSource(SourceFile(path.name, str(path), path.stat().st_size, 0), None, None)
    found = list(_documents_from(source, ReadOptions(max_bytes=1 << 20), 0, 1 << 24))
    assert [d.text for d in found] == [f"d {i}" for i in range(5)]
