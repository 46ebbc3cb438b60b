"""A local run's chunks on one pool of threads: the next chunk's batches read and tokenized while
a chunk's last ones finish, each chunk still written whole and in order; smaller batches at
the run's two ends; the parity check started once the first batch is written."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import word_files

from feedgpu.converters.listing import SourceFile
from feedgpu.converters.text import batches as text_batches
from feedgpu.converters.text import chunk_batches, raw_lines
from feedgpu.converters.text.batches import Batch, Labels, iter_batches
from feedgpu.converters.text.chunk_batches import ChunkBatches, run_batches
from feedgpu.converters.text.chunks import TextRunner
from feedgpu.converters.text.convert import TextOptions, convert_text
from feedgpu.converters.text.options import TextSource
from feedgpu.converters.text.pieces import ChunkWriter
from feedgpu.errors import InputError


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch) -> tuple[Path, TextOptions]:
    """Four JSONL files (a chunk each) of several batches each, and their vocabulary."""
    src, vocab = word_files(tmp_path, 7, 400)
    monkeypatch.setattr(text_batches, "BATCH_CHARS", 8000)  # ~6 batches a chunk
    monkeypatch.setattr(text_batches, "EDGE_CHARS", 1000)
    return src, TextOptions(tokenizer=str(vocab), num_shards=3, chunk_mb=0.02)


def slow(monkeypatch) -> None:
    """Batches tokenized 20 ms slower: a chunk's last ones are still in flight when its
    reading ends, whatever the machine (reading a batch here takes well under that)."""
    import time

    real = TextRunner._encode

    def encode(self, *args):
        time.sleep(0.02)
        return real(self, *args)

    monkeypatch.setattr(TextRunner, "_encode", encode)


def shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.tfrecord-*"))}


def test_the_next_chunk_is_read_ahead_and_the_bytes_are_a_chunk_at_a_times(
    tmp_path: Path, corpus, monkeypatch
) -> None:
    src, options = corpus
    slow(monkeypatch)
    work = tmp_path / "out" / ".feedgpu-work"
    read_early: list[int] = []  # chunks fed a batch before the chunk ahead of them was marked
    real_feed = ChunkBatches.feed

    def feed(self, submit):
        if self.index and not (work / f"chunk-{self.index - 1:05d}.json").exists():
            read_early.append(self.index)
        return real_feed(self, submit)

    monkeypatch.setattr(ChunkBatches, "feed", feed)
    convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    assert set(read_early) == {1, 2, 3}
    real_run = chunk_batches.run_batches
    monkeypatch.setattr(
        "feedgpu.converters.text.chunks.run_batches",
        lambda current, submit, emit, limit, ahead=None: real_run(current, submit, emit, limit),
    )
    convert_text(str(src), str(tmp_path / "alone"), options, quiet=True)  # a chunk at a time
    assert shards(tmp_path / "out") == shards(tmp_path / "alone")


def test_a_failed_parity_check_redoes_the_chunk_and_what_was_read_ahead(
    tmp_path: Path, corpus, monkeypatch
) -> None:
    """The verdict against the compiled road arrives after the first chunk was tokenized and the
    second read ahead by the compiled road: both are redone with HF, every id HF's."""
    from tokenizers import Tokenizer

    from feedgpu.converters.text.tokenizer import TextTokenizer

    src, options = corpus
    slow(monkeypatch)
    real_line_ids, real_parity = TextTokenizer.line_ids, TextRunner.check_parity
    real_ids = TextTokenizer.ids
    ahead = threading.Event()  # the second chunk's batches were submitted by the compiled road
    real_feed = ChunkBatches.feed

    def feed(self, submit):
        real_feed(self, submit)
        if self.index == 1 and self.fast_used:
            ahead.set()

    def wrong_ids(self, texts):  # a compiled road that disagrees with HF
        values, lengths = real_ids(self, texts)
        return (values + 1) % 12, lengths

    def wrong_line_ids(self, field):  # its lines parsed and tokenized at once
        step = real_line_ids(self, field)

        def ids(data, ends, unk=None):  # int64 ids, whether or not varints are asked for
            values, lengths, taken, left = step(data, ends)
            return (values + 1) % 12, lengths, taken, left

        return ids

    def late_parity(self):
        assert ahead.wait(timeout=60), "the second chunk was not read ahead"
        real_parity(self)

    monkeypatch.setattr(ChunkBatches, "feed", feed)
    monkeypatch.setattr(TextTokenizer, "ids", wrong_ids)
    monkeypatch.setattr(TextTokenizer, "line_ids", wrong_line_ids)
    monkeypatch.setattr(TextRunner, "check_parity", late_parity)
    out = tmp_path / "out"
    convert_text(str(src), str(out), options, quiet=True)
    hf = Tokenizer.from_file(str(out / "tokenizer.json"))
    import tensorflow as tf

    texts = {
        f"{p.name}:{i}": json.loads(line)["text"]
        for p in sorted(src.iterdir())
        for i, line in enumerate(p.read_text().splitlines(), 1)
    }
    seen = 0
    for name in shards(out):
        for raw in tf.data.TFRecordDataset(str(out / name)):
            example = tf.train.Example.FromString(raw.numpy())
            features = example.features.feature
            ids = list(features["input_ids"].int64_list.value)
            at = 0
            for doc_id, size in zip(
                features["doc_id"].bytes_list.value,
                features["length"].int64_list.value,
                strict=True,
            ):
                assert ids[at : at + size] == hf.encode(texts[doc_id.decode()]).ids
                at += size
                seen += 1
    assert seen == len(texts)


def test_a_strict_error_in_the_chunk_read_ahead_comes_after_the_chunk_before_is_kept(
    tmp_path: Path, corpus
) -> None:
    src, options = corpus
    (src / "part-2.jsonl").write_bytes(b'\0\0binary{"text": "x"}\n')  # refused while reading
    out = tmp_path / "out"
    with pytest.raises(InputError, match=r"part-2\.jsonl"):
        convert_text(str(src), str(out), options, quiet=True, strict=True)
    work = out / ".feedgpu-work"
    assert sorted(p.name for p in work.glob("chunk-*.json")) == [
        "chunk-00000.json",
        "chunk-00001.json",
    ]


def test_run_batches_emits_in_order_within_the_limit_and_reads_ahead_only_after_the_chunk(
    tmp_path: Path,
) -> None:
    made: list[tuple[int, int]] = []
    in_flight, most = [0], [0]
    lock = threading.Lock()
    full = threading.Event()  # results wait until the limit was reached
    ahead = threading.Event()  # the first chunk's last waits for the second's first read

    def batches(index: int, count: int):
        for i in range(count):
            made.append((index, i))
            if (index, i) == (1, 0):
                ahead.set()
            yield Batch(doc_ids=[f"{index}:{i}"])

    def work(batch: Batch) -> tuple[list, str]:
        assert full.wait(timeout=30)
        if batch.doc_ids == ["0:8"]:
            assert ahead.wait(timeout=30), "the next chunk was not read meanwhile"
        with lock:
            in_flight[0] -= 1
        return [], batch.doc_ids[0]

    with ThreadPoolExecutor(3) as pool:

        def submit(batch: Batch):
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
            if len(made) > 4:
                full.set()
            return pool.submit(work, batch), True

        emitted: list[str] = []
        first = ChunkBatches(0, batches(0, 9), [])
        second = run_batches(
            first,
            submit,
            lambda batch, result: emitted.append(result),
            4,
            lambda: ChunkBatches(1, batches(1, 20), []),
        )
        assert emitted == [f"0:{i}" for i in range(9)]
        assert second is not None and second.index == 1 and second.fast_used
        assert made.index((1, 0)) == 9  # read after every batch of the first chunk
        assert most[0] <= 5  # at most limit + the one just submitted
        rest: list[str] = []
        assert run_batches(second, submit, lambda b, r: rest.append(r), 4) is None
        assert rest == [f"1:{i}" for i in range(20)]


def test_a_chunk_that_may_be_kept_is_not_read_ahead(tmp_path: Path, corpus, monkeypatch):
    """Chunks 1 and 3 kept from an earlier run's piece folders (Beam's), 0 and 2 to redo:
    the chunks before them do not read them ahead, and they are appended, not tokenized."""
    from feedgpu.converters.text import chunks

    src, options = corpus
    out = tmp_path / "out"

    def stop(*args):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:  # chunks written as piece folders, as Beam's are
        patch.setattr(chunks, "ShardFiles", lambda work, keys: None)
        patch.setattr(chunks, "text_statistics", stop)  # stopped once every chunk is done
        with pytest.raises(KeyboardInterrupt):
            convert_text(str(src), str(out), options, quiet=True)
    for index in (0, 2):  # their markers lost: to redo
        (out / ".feedgpu-work" / f"chunk-{index:05d}.json").unlink()
    read: list[int] = []
    real_feed = ChunkBatches.feed

    def feed(self, submit):
        read.append(self.index)
        return real_feed(self, submit)

    with monkeypatch.context() as patch:
        patch.setattr(ChunkBatches, "feed", feed)
        convert_text(str(src), str(out), options, quiet=True)
    assert sorted(set(read)) == [0, 2]
    convert_text(str(src), str(tmp_path / "clean"), options, quiet=True)
    assert shards(out) == shards(tmp_path / "clean")


def test_run_batches_raises_a_batchs_strict_error_before_the_readings() -> None:
    def batches():
        yield Batch(doc_ids=["x"])
        raise InputError("read: bad file")

    def failing(batch: Batch):
        raise InputError("parsed: bad line")

    with ThreadPoolExecutor(1) as pool:
        current = ChunkBatches(0, batches(), [])
        with pytest.raises(InputError, match="parsed"):
            run_batches(current, lambda b: (pool.submit(failing, b), False), print, 4)
        current = ChunkBatches(0, batches(), [])
        emitted: list[Any] = []
        with pytest.raises(InputError, match="read"):
            run_batches(
                current,
                lambda b: (pool.submit(lambda: ([], 1)), False),
                lambda b, r: emitted.append(r),
                4,
                lambda: pytest.fail("no chunk is read after a refused one"),
            )
        assert emitted == [1]  # the batch read before the error is written first


def test_batches_are_smaller_at_the_runs_two_ends_by_the_bytes_alone(
    tmp_path: Path, monkeypatch
) -> None:
    lines = [json.dumps({"text": f"{'w' * (i % 50)} {i}"}) for i in range(3000)]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(text_batches, "BATCH_CHARS", 16000)
    monkeypatch.setattr(text_batches, "EDGE_CHARS", 2000)
    path = tmp_path / "a.jsonl"
    source = TextSource(SourceFile("a.jsonl", str(path), path.stat().st_size, 0), None, None)
    labels, read = Labels({"train": 1.0}, {}), text_batches.ReadOptions()

    def sizes(first: bool, last: bool) -> list[int]:
        found = iter_batches([source], read, labels, [], False, first, last)
        return [batch.chars for batch in found]

    middle, first, last = sizes(False, False), sizes(True, False), sizes(False, True)
    total = sum(middle)
    assert sum(first) == sum(last) == total
    assert all(16000 <= s < 16100 for s in middle[:-1])
    assert [s // 1000 for s in first[:4]] == [2, 4, 8, 16]  # an eighth, a quarter, a half
    left = total
    for size in last[:-1]:  # a third of what is left, but EDGE_CHARS at least
        assert max(2000, min(16000, left // 3)) <= size < max(2000, min(16000, left // 3)) + 100
        left -= size
    assert max(last[-3:]) < 2100 and len(last) > len(middle)
    both = sizes(True, True)  # a run of one chunk: both ends
    assert [s // 1000 for s in both[:3]] == [2, 4, 8] and max(both[-3:]) < 2100
    assert sum(both) == total
    monkeypatch.setattr(raw_lines, "BLOCK_BYTES", 1000)  # however the file is read
    assert sizes(True, True) == both  # the bytes alone decide


def test_the_parity_check_starts_once_the_first_batch_is_written(
    tmp_path: Path, corpus, monkeypatch
) -> None:
    src, options = corpus
    written = threading.Event()
    started_after: list[bool] = []
    real_emit, real_parity = ChunkWriter.put, TextRunner.check_parity

    def emit(self, *args):
        found = real_emit(self, *args)
        written.set()
        return found

    def parity(self):
        started_after.append(written.is_set())
        real_parity(self)

    monkeypatch.setattr(ChunkWriter, "put", emit)
    monkeypatch.setattr(TextRunner, "check_parity", parity)
    convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    assert started_after == [True]
