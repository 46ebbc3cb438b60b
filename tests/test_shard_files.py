"""A local text run appends each chunk's records to its shards' files: resumed after any stop,
from piece folders (Beam's) or from files that lost bytes, it gives the uninterrupted bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import word_files

from feedgpu.converters.text import chunks
from feedgpu.converters.text.chunks import TextRunner
from feedgpu.converters.text.convert import TextOptions, convert_text
from feedgpu.converters.text.pieces import PieceShardBody
from feedgpu.converters.text.shard_files import SUFFIX, ShardFiles

WORK = ".feedgpu-work"


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, TextOptions]:
    """Four JSONL files of short documents (a chunk each) and a vocabulary for them."""
    src, vocab = word_files(tmp_path, 5, 300)
    options = TextOptions(tokenizer=str(vocab), num_shards=3, chunk_mb=0.01, docs_per_record=1)
    return src, options  # a record per document: every chunk writes to every shard


def same_dataset(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def counted_chunks(monkeypatch) -> list[int]:
    """The chunks a run tokenizes, in order (those it keeps from an earlier run are not)."""
    redone: list[int] = []
    real = TextRunner._run_chunk

    def counted(self, index, *args):
        redone.append(index)
        return real(self, index, *args)

    monkeypatch.setattr(TextRunner, "_run_chunk", counted)
    return redone


def stopped_at_chunk(monkeypatch, stop: int) -> None:
    """Runs that stop (as if killed) when they reach chunk `stop`."""
    real = TextRunner._run_chunk

    def run_chunk(self, index, *args):
        if index == stop:
            raise KeyboardInterrupt
        return real(self, index, *args)

    monkeypatch.setattr(TextRunner, "_run_chunk", run_chunk)


def test_a_run_resumed_from_beams_piece_folders_appends_them(
    tmp_path: Path, corpus, monkeypatch
) -> None:
    src, options = corpus
    with monkeypatch.context() as patch:  # chunks written as piece folders, as Beam's are
        patch.setattr(chunks, "ShardFiles", lambda work, keys: None)
        stopped_at_chunk(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    work = tmp_path / "out" / WORK
    assert len([p for p in work.iterdir() if p.is_dir()]) == 2  # two chunks' piece folders
    redone = counted_chunks(monkeypatch)
    convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    assert redone == [2, 3]  # the folders' chunks appended, not tokenized again
    monkeypatch.undo()
    convert_text(str(src), str(tmp_path / "clean"), options, quiet=True)
    same_dataset(tmp_path / "out", tmp_path / "clean")


def test_shard_files_that_lost_bytes_redo_their_chunks(tmp_path: Path, corpus, monkeypatch):
    src, options = corpus
    with monkeypatch.context() as patch:
        stopped_at_chunk(patch, 3)
        with pytest.raises(KeyboardInterrupt):
            convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    work = tmp_path / "out" / WORK
    files = sorted(work.glob(f"*{SUFFIX}"))
    assert len(files) == 3 and not [p for p in work.iterdir() if p.is_dir()]
    first = json.loads((work / "chunk-00000.json").read_text())["pieces"]
    damaged = files[1]  # cut inside chunk 1's records: chunks 1 and 2 are redone, 0 kept
    damaged.write_bytes(damaged.read_bytes()[: first[damaged.stem]["bytes"] + 5])
    redone = counted_chunks(monkeypatch)
    convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    assert redone == [1, 2, 3]
    convert_text(str(src), str(tmp_path / "clean"), options, quiet=True)
    same_dataset(tmp_path / "out", tmp_path / "clean")


def test_a_run_stopped_among_the_renames_resumes_without_tokenizing(
    tmp_path: Path, corpus, monkeypatch
) -> None:
    src, options = corpus
    real_prepared, adopted = PieceShardBody.prepared, []

    def one_then_stopped(self, task):
        if adopted:
            raise KeyboardInterrupt
        adopted.append(task.filename)
        return real_prepared(self, task)

    with monkeypatch.context() as patch:
        patch.setattr(PieceShardBody, "prepared", one_then_stopped)
        with pytest.raises(KeyboardInterrupt):
            convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    assert (tmp_path / "out" / adopted[0]).exists()
    redone = counted_chunks(monkeypatch)
    convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    assert redone == []  # every chunk kept: the renamed shard is not looked for in the files
    convert_text(str(src), str(tmp_path / "clean"), options, quiet=True)
    same_dataset(tmp_path / "out", tmp_path / "clean")


def test_begin_cuts_what_an_attempt_appended_after_the_kept_chunks(tmp_path: Path) -> None:
    files = ShardFiles(str(tmp_path), ["train-00000", "train-00001"])
    files.handle("train-00000").write(b"kept")
    files.flush()
    files.kept({"train-00000": {"bytes": 4}})
    files.handle("train-00000").write(b"lost")
    files.handle("train-00001").write(b"lost too")
    files.handle("test-00000").write(b"a shard written before: scratch")
    files.begin()
    files.handle("train-00000").write(b"+again")
    files.kept({"train-00000": {"bytes": 6}})
    files.close()
    assert Path(files.path("train-00000")).read_bytes() == b"kept+again"
    assert Path(files.path("train-00001")).read_bytes() == b""
    assert not Path(files.path("test-00000")).exists()


def test_a_local_run_resumed_on_beam_redoes_the_appended_chunks(
    tmp_path: Path, corpus, monkeypatch
) -> None:
    src, options = corpus
    with monkeypatch.context() as patch:
        stopped_at_chunk(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    convert_text(str(src), str(tmp_path / "out"), options, quiet=True, runner="beam")
    convert_text(str(src), str(tmp_path / "clean"), options, quiet=True)
    same_dataset(tmp_path / "out", tmp_path / "clean")


def test_write_behind_where_the_os_has_no_fdatasync(tmp_path: Path, corpus, monkeypatch):
    from feedgpu.converters.text import shard_files

    src, options = corpus
    monkeypatch.setattr(shard_files, "WRITE_BEHIND", 1000)  # a flush every few records
    monkeypatch.delattr(shard_files.os, "fdatasync")  # as on macOS
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(shard_files.os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    monkeypatch.undo()
    assert synced  # written behind, by fsync
    convert_text(str(src), str(tmp_path / "clean"), options, quiet=True)
    same_dataset(tmp_path / "out", tmp_path / "clean")
