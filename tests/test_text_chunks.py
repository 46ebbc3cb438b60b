"""A text run's chunks: each into a piece folder of its own, batches emitted in order within a
limit; a run stopped anywhere resumes from the chunks and shards it finished, with the same
bytes as one that was never stopped."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import word_files

from feedgpu.converters.text import batches as text_batches
from feedgpu.converters.text import chunks as text_chunks
from feedgpu.converters.text.chunks import TextRunner, run_batches
from feedgpu.converters.text.convert import TextOptions, convert_text
from feedgpu.converters.text.pieces import PieceShardBody
from feedgpu.errors import InputError

WORK = ".feedgpu-work"


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch) -> tuple[Path, TextOptions]:
    """Four JSONL files (a chunk each) of several batches each, and their vocabulary."""
    src, vocab = word_files(tmp_path, 7, 400)
    monkeypatch.setattr(text_batches, "BATCH_CHARS", 8000)  # ~6 batches a chunk
    chunk_mb = max(p.stat().st_size for p in src.iterdir()) * 1.05 / (1 << 20)  # a file each
    options = TextOptions(tokenizer=str(vocab), num_shards=3, chunk_mb=chunk_mb, docs_per_record=1)
    return src, options  # a record per document: every chunk writes to every shard


def same_dataset(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def counted_chunks(monkeypatch) -> list[int]:
    """The chunks a run tokenizes, in order (those it keeps from an earlier run are not)."""
    redone: list[int] = []
    real = TextRunner.run_chunks

    def counted(self, indices, *args):
        redone.extend(indices)
        return real(self, indices, *args)

    monkeypatch.setattr(TextRunner, "run_chunks", counted)
    return redone


def stopped_at_chunk(monkeypatch, stop: int) -> None:
    """Runs that stop (as if killed) when chunk `stop` begins to be written: every chunk
    before it finished (batches are written in order), it and those after not."""
    real = text_chunks._ChunkOut.__init__

    def begun(self, runner, index):
        if index == stop:
            raise KeyboardInterrupt
        real(self, runner, index)

    monkeypatch.setattr(text_chunks._ChunkOut, "__init__", begun)


def stopped_run(monkeypatch, src: Path, out: Path, options: TextOptions, stop: int) -> None:
    """A conversion into out stopped (as if killed) when chunk `stop` begins."""
    with monkeypatch.context() as patch:
        stopped_at_chunk(patch, stop)
        with pytest.raises(KeyboardInterrupt):
            convert_text(str(src), str(out), options, quiet=True)


def test_a_stopped_run_resumes_from_its_finished_chunks(tmp_path: Path, corpus, monkeypatch):
    src, options = corpus
    stopped_run(monkeypatch, src, tmp_path / "out", options, 2)
    work = tmp_path / "out" / WORK
    assert len([p for p in work.iterdir() if p.is_dir()]) == 2  # two chunks' piece folders
    redone = counted_chunks(monkeypatch)
    convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    assert redone == [2, 3]  # the finished chunks kept, not tokenized again
    monkeypatch.undo()
    convert_text(str(src), str(tmp_path / "clean"), options, quiet=True)
    same_dataset(tmp_path / "out", tmp_path / "clean")


def test_a_run_stopped_among_the_shards_resumes_without_tokenizing(
    tmp_path: Path, monkeypatch
) -> None:
    """One chunk: each shard is its one piece, renamed; the shards left are renamed on resume,
    and a shard lost after its piece was renamed redoes the chunk."""
    src, vocab = word_files(tmp_path, 3, 200)
    options = TextOptions(tokenizer=str(vocab), num_shards=3, docs_per_record=1)
    real_prepared = PieceShardBody.prepared
    convert_text(str(src), str(tmp_path / "clean"), options, quiet=True)
    for damaged in (False, True):
        out, adopted = tmp_path / f"out-{damaged}", []

        def one_then_stopped(self, task, adopted=adopted):
            if adopted:
                raise KeyboardInterrupt
            made = real_prepared(self, task)
            assert made is not None  # a shard of one piece is that piece
            adopted.append(task.filename)
            return made

        with monkeypatch.context() as patch:
            patch.setattr(PieceShardBody, "prepared", one_then_stopped)
            with pytest.raises(KeyboardInterrupt):
                convert_text(str(src), str(out), options, quiet=True)
        assert (out / adopted[0]).exists()
        if damaged:  # its piece, renamed, is gone: the chunk is tokenized again
            (out / adopted[0]).write_bytes(b"damaged")
        with monkeypatch.context() as patch:
            redone = counted_chunks(patch)
            convert_text(str(src), str(out), options, quiet=True)
        assert redone == ([0] if damaged else [])
        same_dataset(out, tmp_path / "clean")


def test_a_local_run_resumed_on_beam_keeps_its_chunks(tmp_path: Path, corpus, monkeypatch):
    src, options = corpus
    stopped_run(monkeypatch, src, tmp_path / "out", options, 2)
    convert_text(str(src), str(tmp_path / "out"), options, quiet=True, runner="beam")
    convert_text(str(src), str(tmp_path / "clean"), options, quiet=True)
    same_dataset(tmp_path / "out", tmp_path / "clean")


def test_a_strict_error_reading_comes_after_the_chunk_before_is_kept(
    tmp_path: Path, corpus
) -> None:
    src, options = corpus
    size = (src / "part-2.jsonl").stat().st_size  # a chunk of its own, refused while reading
    (src / "part-2.jsonl").write_bytes(b'\0\0binary{"text": "x"}\n'.ljust(size - 1, b"x") + b"\n")
    out = tmp_path / "out"
    with pytest.raises(InputError, match=r"part-2\.jsonl"):
        convert_text(str(src), str(out), options, quiet=True, strict=True)
    assert sorted(p.name for p in (out / WORK).glob("chunk-*.json")) == [
        "chunk-00000.json",
        "chunk-00001.json",
    ]


def test_run_batches_emits_in_order_within_the_limit() -> None:
    import threading

    in_flight, most = [0], [0]
    lock = threading.Lock()
    release = threading.Event()  # no result until the limit was reached

    def work(item: int) -> str:
        assert release.wait(timeout=30)
        with lock:
            in_flight[0] -= 1
        return f"done {item}"

    with ThreadPoolExecutor(3) as pool:

        def submit(item: int):
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
                if in_flight[0] > 4:
                    release.set()
            return pool.submit(work, item)

        emitted: list[tuple[int, str]] = []
        run_batches(iter(range(20)), submit, lambda i, r: emitted.append((i, r)), 4)
    assert emitted == [(i, f"done {i}") for i in range(20)]
    assert most[0] == 5  # the limit, and the one just submitted


def test_run_batches_raises_a_batchs_strict_error_before_the_readings() -> None:
    def items():
        yield 1
        raise InputError("read: bad file")

    def failing():
        raise InputError("parsed: bad line")

    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(InputError, match="parsed"):
            run_batches(items(), lambda i: pool.submit(failing), print, 4)
        emitted: list[Any] = []
        with pytest.raises(InputError, match="read"):
            run_batches(
                items(), lambda i: pool.submit(lambda: 7), lambda i, r: emitted.append(r), 4
            )
        assert emitted == [7]  # the item read before the error is written first


@pytest.mark.parametrize("name", ["big.jsonl", "big.txt"])
def test_one_big_file_is_cut_into_chunks_and_resumes_inside_it(
    tmp_path: Path, monkeypatch, name: str
) -> None:
    """A file bigger than a chunk is cut at line starts: a run stopped at its third part keeps
    the first two, and the shards equal an uninterrupted run's, documents named by their
    line in the whole file."""
    import json

    from tokenizers import Tokenizer

    from feedgpu.converters.text.chunk_plan import plan_chunks

    src, vocab = word_files(tmp_path, 1, 1500, files=1)
    (part,) = sorted(src.iterdir())
    texts = [json.loads(line)["text"] for line in part.read_text().splitlines()]
    part.unlink()
    if name.endswith(".txt"):
        (src / name).write_text("\n".join(texts))  # the last line without a newline
    else:
        (src / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    options = TextOptions(
        tokenizer=str(vocab), num_shards=2, chunk_mb=0.01, docs_per_record=1, doc_per_line=True
    )
    stopped_run(monkeypatch, src, tmp_path / "out", options, 2)
    with monkeypatch.context() as patch:
        redone = counted_chunks(patch)
        convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    assert redone[0] == 2 and redone == list(range(2, redone[-1] + 1))  # two parts kept
    convert_text(str(src), str(tmp_path / "clean"), options, quiet=True)
    same_dataset(tmp_path / "out", tmp_path / "clean")
    hf = Tokenizer.from_file(str(tmp_path / "out" / "tokenizer.json"))
    from conftest import shard_examples

    stored = {ex["doc_id"][0].decode(): ex["input_ids"] for ex in shard_examples(tmp_path / "out")}
    assert len(stored) == len(texts)
    assert all(stored[f"{name}:{i}"] == hf.encode(t).ids for i, t in enumerate(texts, 1))
    from feedgpu.converters.listing import SourceFile
    from feedgpu.converters.text.options import TextSource

    path = src / name
    whole = [TextSource(SourceFile(name, str(path), path.stat().st_size, 0), None, None)]
    chunks = plan_chunks(whole, options)
    spans = [c[0].span for c in chunks]
    assert len(chunks) == len(redone) + 2 > 3 and all(len(c) == 1 for c in chunks)
    assert spans[0][:1] == (0,) and spans[-1][1] == path.stat().st_size  # type: ignore[index]
    data = path.read_bytes()
    for (start, end, line), (following, _, _) in itertools.pairwise(spans):  # type: ignore[misc]
        assert end == following and data[start - 1 : start] in (b"", b"\n")
        assert data[:start].count(b"\n") + 1 == line


def test_a_gzip_file_stays_one_chunk(tmp_path: Path) -> None:
    import gzip

    from feedgpu.converters.listing import SourceFile
    from feedgpu.converters.text.chunk_plan import plan_chunks
    from feedgpu.converters.text.options import TextSource

    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "x"}\n' * 5000, compresslevel=0))
    source = TextSource(SourceFile(path.name, str(path), path.stat().st_size, 0), None, None)
    chunks = plan_chunks([source], TextOptions(tokenizer="x", chunk_mb=0.01))
    assert chunks == [[source]]  # it cannot be entered in its middle
