"""Batches for the tokenizer threads: filled by lines or bytes, order kept, cut from the lines
alone whatever blocks they are read in."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from feedgpu.converters.listing import SourceFile
from feedgpu.converters.text import batches as text_batches
from feedgpu.converters.text import raw_lines
from feedgpu.converters.text.batches import Labels, iter_batches
from feedgpu.converters.text.options import TextSource


def test_batches_fill_by_lines_or_bytes_whatever_the_blocks_and_keep_every_document(
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
    source = TextSource(SourceFile("a.jsonl", str(tmp_path / "a.jsonl"), 0, 0), None, None)
    skips: list = []
    labels = Labels({"train": 1.0}, {})
    cuts = []
    for block_lines, block_bytes in ((16, 1500), (8192, 1 << 20)):  # however the lines are read
        monkeypatch.setattr(raw_lines, "BLOCK_LINES", block_lines)
        monkeypatch.setattr(raw_lines, "BLOCK_BYTES", block_bytes)
        batches = list(iter_batches([source], text_batches.ReadOptions(), labels, skips, False))
        cuts.append([batch.lines for batch in batches])
    assert cuts[0] == cuts[1]  # the batches are cut from the lines alone
    assert not skips and all(len(b) == 0 for b in batches)  # lines, not parsed yet
    for batch in batches[:-1]:  # full: by count, or by bytes at its last line
        raw, _, end, _ = batch.raw[-1]
        last = raw.ends[end] - raw.ends[end - 1]
        assert batch.lines == 64 or batch.chars >= 6000 > batch.chars - last
    assert 64 in cuts[0] and min(cuts[0][:-1]) < 64
    for batch in batches:
        skips += batch.parse(text_batches.ReadOptions(), labels.fractions, False)
    assert [t for b in batches for t in b.texts] == texts[:700] + texts[701:]
    assert [s.path for s in skips] == ["a.jsonl:701"]
    assert [b.splits for b in batches] == [["train"] * len(b) for b in batches]


def test_blocks_hold_a_files_lines_as_readlines_cuts_them_plain_or_gzipped(tmp_path: Path) -> None:
    """`read_blocks` at any block size: every line once, in order, as `readlines` cuts it
    (lines longer than a block, blank ones, none at the end without its newline). Blocks are
    the reads whole (bounds ending before the bytes do), a plain file's part line read again
    with the next block, a gzip file's joined to it."""
    import gzip

    rng = random.Random(9)
    lines = [b"x" * rng.choice([0, 1, 30, 700, 5000]) + b"\n" for _ in range(300)] + [b"end"]
    data = b"".join(lines)
    (tmp_path / "a.jsonl").write_bytes(data)
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(data))
    for block in (1, 64, 1000, 4096, 1 << 20):
        for name, opener in (("a.jsonl", open), ("a.jsonl.gz", gzip.open)):
            with pytest.MonkeyPatch.context() as patch, opener(tmp_path / name, "rb") as f:
                patch.setattr(raw_lines, "BLOCK_BYTES", block)
                blocks = list(raw_lines.read_blocks(f))
            got = [b[s:e] for b, ends in blocks for s, e in itertools.pairwise(ends)]
            assert got == lines, (name, block)
            if name == "a.jsonl":  # its part lines read again, never joined
                assert any(len(b) > ends[-1] for b, ends in blocks) == (block > 1), block


def test_a_pipes_blocks_are_cut_not_read_again(tmp_path: Path) -> None:
    """A named pipe given as a corpus file (not seekable): every line read, in order."""
    import os
    import threading

    fifo = tmp_path / "c.jsonl"
    os.mkfifo(fifo)
    lines = [b"%d %s\n" % (i, b"w" * (i % 97)) for i in range(3000)]

    def write() -> None:
        with open(fifo, "wb") as f:
            f.write(b"".join(lines))

    writer = threading.Thread(target=write)
    writer.start()
    with pytest.MonkeyPatch.context() as patch, open(fifo, "rb") as f:
        patch.setattr(raw_lines, "BLOCK_BYTES", 1000)
        blocks = list(raw_lines.read_blocks(f))
    writer.join()
    assert [b[s:e] for b, ends in blocks for s, e in itertools.pairwise(ends)] == lines


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


def test_strict_names_the_first_bad_document_in_reading_order(tmp_path: Path) -> None:
    """--strict: a malformed line (found by the tokenizer thread that parses its batch) before a
    binary file (found by the reading thread) is the error reported, however the threads ran."""
    import pytest

    import feedgpu
    from feedgpu.errors import InputError

    src = tmp_path / "src"
    src.mkdir()
    good = [json.dumps({"text": f"line {i} of a"}) for i in range(300)]
    (src / "a.jsonl").write_text("\n".join([*good[:4], "{broken", *good[4:]]) + "\n")
    (src / "b.jsonl").write_bytes(b'\0\0binary{"text": "x"}\n')
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "line", "of", "a"]) + "\n")
    options = feedgpu.TextOptions(tokenizer=str(vocab))
    for attempt in range(3):
        with pytest.raises(InputError, match=r"a\.jsonl:5"):
            feedgpu.convert_text(
                str(src), str(tmp_path / f"out{attempt}"), options, quiet=True, strict=True
            )


def test_batch_statistics_summed_in_arrays_match_counting_each_document(tmp_path: Path) -> None:
    # Short and long batches in one chunk, as a corpus of mixed lengths gives them: the pieces'
    # counts are each document's, added up.
    import numpy as np

    from feedgpu.converters.text.pieces import ChunkWriter

    rng = np.random.default_rng(3)
    names = [f"train-{i:05d}" for i in range(5)]
    writer = ChunkWriter(str(tmp_path), names, None)
    expected: dict[str, dict] = {n: {"documents": 0, "doc_tokens": 0, "unknown": 0} for n in names}
    lengths: dict[str, dict[int, int]] = {n: {} for n in names}
    for longest in (40, 9000, 300, 20000, 60):
        n = int(rng.integers(1, 400))
        shards = rng.integers(0, len(names), n)
        stored = rng.integers(0, longest, n)
        full = stored + rng.integers(0, 3, n)
        unknown = rng.integers(0, 2, n)
        writer._count(shards, full, unknown, shards, stored)
        columns = (shards.tolist(), full.tolist(), unknown.tolist(), stored.tolist())
        for s, f, u, k in zip(*columns, strict=True):
            counts = expected[names[s]]
            counts["documents"] += 1
            counts["doc_tokens"] += f
            counts["unknown"] += u
            lengths[names[s]][k] = lengths[names[s]].get(k, 0) + 1
        writer.pieces.update({key: {"records": 0, "bytes": 0} for key in names})
    pieces = writer.close()
    for key in names:
        got = pieces[key]
        assert {k: got[k] for k in ("documents", "doc_tokens", "unknown")} == expected[key]
        assert got["lengths"] == dict(sorted(lengths[key].items()))


def test_parsing_a_batchs_lines_leaves_what_filled_it_alone() -> None:
    """A batch's lines parsed on a tokenizer thread (no compiled step) add their documents
    but not their characters: the reading thread reads `chars` meanwhile to cut the next
    batches, which must never depend on timing."""
    from conftest import joined_lines as joined

    from feedgpu.converters.text.batches import Batch
    from feedgpu.converters.text.raw_lines import RawLines
    from feedgpu.converters.text.sources import ReadOptions

    data, ends = joined([json.dumps({"text": f"doc {i}"}).encode() + b"\n" for i in range(5)])
    batch = Batch()
    batch.add_lines(RawLines("a.jsonl", 1, data, ends), 0, 5, "train")
    filled = batch.chars
    batch.parse(ReadOptions(), {"train": 1.0}, strict=False)
    assert batch.texts == [f"doc {i}" for i in range(5)] and batch.chars == filled
