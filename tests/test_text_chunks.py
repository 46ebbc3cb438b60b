"""A text run's chunks: each into a piece folder of its own, batches emitted in order within a
limit; a run stopped anywhere resumes from the chunks and shards it finished, with the same
bytes as one that was never stopped."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import word_files

from feedgpu.converters.text import batches as text_batches
from feedgpu.converters.text.batches import Batch
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
    options = TextOptions(tokenizer=str(vocab), num_shards=3, chunk_mb=0.02, docs_per_record=1)
    return src, options  # a record per document: every chunk writes to every shard


def same_dataset(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def counted_chunks(monkeypatch) -> list[int]:
    """The chunks a run tokenizes, in order (those it keeps from an earlier run are not)."""
    redone: list[int] = []
    real = TextRunner.run_chunk

    def counted(self, index, *args):
        redone.append(index)
        return real(self, index, *args)

    monkeypatch.setattr(TextRunner, "run_chunk", counted)
    return redone


def stopped_at_chunk(monkeypatch, stop: int) -> None:
    """Runs that stop (as if killed) when they reach chunk `stop`."""
    real = TextRunner.run_chunk

    def run_chunk(self, index, *args):
        if index == stop:
            raise KeyboardInterrupt
        return real(self, index, *args)

    monkeypatch.setattr(TextRunner, "run_chunk", run_chunk)


def test_a_stopped_run_resumes_from_its_finished_chunks(tmp_path: Path, corpus, monkeypatch):
    src, options = corpus
    with monkeypatch.context() as patch:
        stopped_at_chunk(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
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
    with monkeypatch.context() as patch:
        stopped_at_chunk(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    convert_text(str(src), str(tmp_path / "out"), options, quiet=True, runner="beam")
    convert_text(str(src), str(tmp_path / "clean"), options, quiet=True)
    same_dataset(tmp_path / "out", tmp_path / "clean")


def test_a_strict_error_reading_comes_after_the_chunk_before_is_kept(
    tmp_path: Path, corpus
) -> None:
    src, options = corpus
    (src / "part-2.jsonl").write_bytes(b'\0\0binary{"text": "x"}\n')  # refused while reading
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

    def work(batch: Batch) -> tuple[list, str]:
        assert release.wait(timeout=30)
        with lock:
            in_flight[0] -= 1
        return [f"skip {batch.doc_ids[0]}"], batch.doc_ids[0]

    with ThreadPoolExecutor(3) as pool:

        def submit(batch: Batch):
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
                if in_flight[0] > 4:
                    release.set()
            return pool.submit(work, batch)

        emitted: list[str] = []
        skips: list[Any] = []
        batches = (Batch(doc_ids=[str(i)]) for i in range(20))
        run_batches(batches, skips, submit, lambda b, r: emitted.append(r), 4)
    assert emitted == [str(i) for i in range(20)]
    assert skips == [f"skip {i}" for i in range(20)]
    assert most[0] == 5  # the limit, and the one just submitted


def test_run_batches_raises_a_batchs_strict_error_before_the_readings() -> None:
    def batches():
        yield Batch(doc_ids=["x"])
        raise InputError("read: bad file")

    def failing(batch: Batch):
        raise InputError("parsed: bad line")

    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(InputError, match="parsed"):
            run_batches(batches(), [], lambda b: pool.submit(failing, b), print, 4)
        emitted: list[Any] = []
        with pytest.raises(InputError, match="read"):
            run_batches(
                batches(),
                [],
                lambda b: pool.submit(lambda: ([], 1)),
                lambda b, r: emitted.append(r),
                4,
            )
        assert emitted == [1]  # the batch read before the error is written first
