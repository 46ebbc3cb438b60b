"""The shard engine: the same bytes whatever the worker count, and after a kill -9."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from feedgpu import ImageOptions, convert_images
from feedgpu.convert.plan import plan_shards
from feedgpu.convert.summary import Summary
from feedgpu.converters.images import ImageProcessor
from feedgpu.samples import write_sample_images


def dataset_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def test_bytes_identical_whatever_the_worker_count(tmp_path: Path, image_folder: Path) -> None:
    opts = ImageOptions(num_shards=5, lossless=False)
    convert_images(str(image_folder), str(tmp_path / "one"), opts, workers=1, quiet=True)
    convert_images(str(image_folder), str(tmp_path / "two"), opts, workers=2, quiet=True)
    one, two = dataset_bytes(tmp_path / "one"), dataset_bytes(tmp_path / "two")
    assert len([n for n in one if ".tfrecord-" in n]) == 5
    assert one == two  # shards, manifest, metadata, skipped.jsonl


def test_plan_mixes_classes_and_respects_shard_count() -> None:
    items = [(f"{c}/{i}.jpg", c) for c in "abc" for i in range(30)]

    def plan(num_shards: int | None, seed: int, total_bytes: int = 90 << 20) -> list:
        return plan_shards(
            items,
            name="d",
            split="train",
            total_bytes=total_bytes,
            target_shard_bytes=30 << 20,
            num_shards=num_shards,
            seed=seed,
        )

    tasks = plan(None, seed=1)
    assert len(tasks) == 16  # parallelism floor beats 3 shards by size
    assert len(plan(None, seed=1, total_bytes=2000 << 20)) == 67  # by size: ceil(2000 / 30)
    assert sorted(i for t in tasks for i in t.items) == sorted(items)
    assert all(len({c for _, c in t.items}) > 1 for t in tasks if len(t.items) >= 5)
    assert plan(None, seed=1) == tasks
    assert plan(4, seed=2) != plan(4, seed=1)
    assert len(plan(500, seed=1)) == len(items)  # never more shards than examples


def test_summary_merges_exactly() -> None:
    a, b, both = Summary(), Summary(), Summary()
    for v in (3, 100, 7):
        a.add_counts("h", {v: 1})
        both.add_counts("h", {v: 1})
    b.add_counts("h", {1000: 1, 5: 2})
    both.add_counts("h", {1000: 1})
    both.add_counts("h", {5: 2})
    a.merge(Summary(b.to_json()))
    assert a.to_json() == both.to_json()
    assert both.to_json()["h"]["min"] == 3 and both.to_json()["h"]["max"] == 1000
    assert both.to_json()["h"]["count"] == 6 and both.to_json()["h"]["sum"] == 1120


def test_summary_of_many_counts_at_once_is_one_value_at_a_time() -> None:
    """add_counts of a mapping (its buckets looked up once per value) records what adding each
    value alone does, floats and repeated values too; counts of 0 or less add nothing; a
    text shard's length counts merge the same from pieces in memory and read back (str keys)."""
    import random
    from collections import Counter

    from feedgpu.converters.text.pieces import merge_lengths

    rng = random.Random(3)
    counts = {rng.randint(0, 5000): rng.randint(-1, 9) for _ in range(3000)}
    counts.update({0.5: 2, 2.0: 1, 1024: 3, 1025: 1})
    at_once, alone = Summary(), Summary()
    at_once.add_counts("x", counts)
    for value, n in sorted(counts.items()):
        for _ in range(max(n, 0)):
            alone.add_counts("x", {value: 1})
    assert at_once.to_json() == alone.to_json()
    kept = {v: n for v, n in counts.items() if n > 0}  # and both what the counts say, by hand
    hist: Counter[str] = Counter()
    for v, n in kept.items():
        hist[str(Summary.bucket(v))] += n
    got = at_once.to_json()["x"]
    assert (got["count"], got["sum"]) == (sum(kept.values()), sum(v * n for v, n in kept.items()))
    assert (got["min"], got["max"]) == (min(kept), max(kept))
    assert got["hist"] == sorted([int(edge), n] for edge, n in hist.items())
    assert Summary.bucket(1025) == 1218 and Summary.bucket(0.5) == 1 and Summary.bucket(0) == 0
    pieces = [{"lengths": {5: 2, 9: 1}}, {"lengths": {"5": 1, "700": 4}}]
    assert merge_lengths(pieces) == {5: 3, 9: 1, 700: 4}
    empty = Summary()
    empty.add_counts("empty", {3: 0, 4: -1})
    assert empty.to_json() == {}


def _group_alive(group: int) -> bool:
    """Whether a process of this process group is still running (not a zombie)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == group:
            return True
    return False


def test_kill_minus_nine_then_resume_gives_identical_bytes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_sample_images(str(src), num_classes=2, images_per_class=60, sizes=((160, 120),))
    args = ["convert", "images", str(src), "--num-shards", "12", "--verify", "full", "--quiet"]
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "feedgpu", *args[:3], str(killed), *args[3:], "--workers", "2"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if killed.exists() and any(
            ".tfrecord-" in p.name and ".tmp-" not in p.name for p in killed.iterdir()
        ):
            break
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "feedgpu.json").exists(), "the run finished before it could be killed"
    # Orphaned workers notice their parent is gone and exit: wait for the last of the group.
    deadline = time.monotonic() + 120
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _group_alive(proc.pid), "the killed run's workers did not exit"
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    from feedgpu.cli import main

    assert main([*args[:3], str(tmp_path / "clean"), *args[3:], "--workers", "1"]) == 0
    assert dataset_bytes(killed) == dataset_bytes(tmp_path / "clean")
    assert not any(".tmp-" in n for n in os.listdir(killed))


def test_resume_rewrites_a_finished_shard_that_no_longer_reads_back(tmp_path: Path) -> None:
    from feedgpu.convert.commit import WORK_DIR, load_finished, write_shard
    from feedgpu.convert.plan import ShardTask
    from feedgpu.convert.pool import ItemShardBody
    from feedgpu.converters.images import ImageProcessor

    src = tmp_path / "src"
    write_sample_images(str(src), num_classes=1, images_per_class=3, sizes=((40, 30),))
    paths = [src / "cat" / f"{i:05d}.jpg" for i in range(3)]
    items = tuple((f"cat/{p.name}", str(p), 0, p.stat().st_size) for p in paths)
    task = ShardTask("train", 0, 1, "d-train.tfrecord-00000-of-00001", items)
    (tmp_path / WORK_DIR).mkdir()
    written = write_shard(
        task, ItemShardBody(ImageProcessor(ImageOptions()), strict=False), str(tmp_path)
    )
    assert written.num_records == 3
    assert load_finished(str(tmp_path), task) == written
    shard = tmp_path / task.filename
    data = bytearray(shard.read_bytes())
    data[-40] ^= 0xFF  # same size, damaged content
    shard.write_bytes(bytes(data))
    assert load_finished(str(tmp_path), task) is None


def test_heap_is_frozen_during_a_conversion_and_as_found_after(
    tmp_path: Path, image_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen_during: list[int] = []
    seen: list[object] = []
    total = sum(1 for p in image_folder.rglob("*.jpg"))  # every image is processed once
    process = ImageProcessor.process

    def recording(self, item):  # type: ignore[no-untyped-def]
        # The first and the last image: gc.get_freeze_count() walks every frozen object (85 ms
        # a call on the heap a full test run leaves; once per image it made this test 6-12 s).
        seen.append(item)
        if len(seen) in (1, total):
            frozen_during.append(gc.get_freeze_count())
        return process(self, item)

    monkeypatch.setattr(ImageProcessor, "process", recording)
    thresholds = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    convert_images(str(image_folder), str(tmp_path / "a"), workers=1, quiet=True)
    assert frozen_during and min(frozen_during) > 0  # older objects were out of collections
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds  # and back after
    gc.freeze()  # a caller that froze its own objects (before forking, say) keeps them frozen
    try:
        convert_images(str(image_folder), str(tmp_path / "b"), workers=1, quiet=True)
        assert gc.get_freeze_count() > 0  # not unfrozen by the conversion
    finally:
        gc.unfreeze()
    assert dataset_bytes(tmp_path / "a") == dataset_bytes(tmp_path / "b")


def test_json_files_are_the_standard_librarys_indented_sorted_text(tmp_path: Path) -> None:
    """`write_json` (by orjson) writes the text of `json.dumps(indent=2, sort_keys=True,
    ensure_ascii=False)`: for a converted text dataset's manifest (its length counts, and the
    statistics the stage gives agree with them), floats orjson writes otherwise (1e-05, NaN,
    1e16), ints beyond 64 bits, escapes, empty containers; and what orjson would not write
    alike (int keys, sorted as numbers; numpy floats) by the standard library itself."""
    import json
    import math

    import numpy as np

    import feedgpu
    from feedgpu import storage

    out = tmp_path / "ds"
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"éte {'mot ' * i}"}) + "\n" for i in range(40)))
    feedgpu.convert_text(
        str(corpus), str(out), feedgpu.TextOptions(tokenizer="train:wordpiece:200"), quiet=True
    )
    manifest = json.loads((out / "feedgpu.json").read_text())
    lengths, summary = manifest["text"]["length_counts"], manifest["statistics"]["example_length"]
    assert summary["count"] == sum(n for _, n in lengths) == manifest["text"]["documents"] == 40
    assert summary["sum"] == sum(length * n for length, n in lengths)
    assert (summary["min"], summary["max"]) == (lengths[0][0], lengths[-1][0])
    assert len(lengths) > 1 and len(summary["hist"]) > 1
    floats = [0.1, 6e-06, 1e-05, 1e16, 2.5e-07, 123456789.25, math.nan, -math.inf, -0.0]
    extra = {
        "zé": [[1, 2.5], [], {}, ()],
        "a": {"b": [*floats, -3, 2**64, -(2**63) - 1, 2**64 - 1, True, None]},
        "text": ["".join(map(chr, range(0, 0x3000, 7))), '\x7f\u2028\ufeff"\\/\U0001f600'],
    }
    for obj in (manifest, extra, {"n": {10: 1, 9: 2}}, {"x": [np.float64(0.5)]}):
        storage.write_json(str(tmp_path / "x.json"), obj)
        text = (tmp_path / "x.json").read_text(encoding="utf-8")
        assert text == json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_an_atomic_write_that_fails_leaves_no_temporary_and_names_are_the_writer_s(
    tmp_path: Path,
) -> None:
    import threading

    from feedgpu import storage

    (tmp_path / "taken").mkdir()  # a folder where the file should go: the rename fails
    with pytest.raises(OSError):
        storage.write_atomic(str(tmp_path / "taken"), b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    # Two threads writing one path at once: each through its own temporary, one wins whole.
    writes = [
        threading.Thread(target=storage.write_atomic, args=(str(tmp_path / "f"), d))
        for d in (b"a" * 100_000, b"b" * 100_000)
    ]
    for t in writes:
        t.start()
    for t in writes:
        t.join()
    assert (tmp_path / "f").read_bytes() in (b"a" * 100_000, b"b" * 100_000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "taken"]


def test_shards_of_a_stage_written_on_threads_in_order_and_cancelled_on_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stage's shards (text's) are written by four threads at most, however many workers:
    results in the tasks' order even when a later shard finishes first, every shard whole
    under its name; an error in one reaches the caller, the shards not begun are never
    written, and no temporary is left."""
    import threading

    from feedgpu.convert import execute
    from feedgpu.convert.commit import WORK_DIR, ShardResult
    from feedgpu.convert.plan import ShardTask
    from feedgpu.convert.run_options import RunOptions
    from feedgpu.errors import InputError

    tasks = [ShardTask("train", i, 40, f"d-train.tfrecord-{i:05d}", ()) for i in range(40)]
    later_ended = threading.Event()  # the first shard ends after another one
    release = threading.Event()  # with a failing first shard: the others wait for its end
    begun: list[int] = []
    pools: list[int] = []

    class Watched(execute.ThreadPoolExecutor):
        """The writers' pool: its size kept; the waiting shards released only once the
        error has reached the writer and the shards not begun are cancelled."""

        def __init__(self, workers: int, **options: Any) -> None:
            pools.append(workers)
            super().__init__(workers, **options)

        def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
            super().shutdown(wait=False, cancel_futures=cancel_futures)
            release.set()
            super().shutdown(wait=wait)

    def body(task: ShardTask, out, progress) -> ShardResult:
        begun.append(task.index)
        if failing and task.index == 0:
            raise InputError("a shard that cannot be written")
        if failing:
            assert release.wait(timeout=60)
        elif task.index == 0:
            assert later_ended.wait(timeout=60)
        out.write(bytes([task.index]) * (task.index + 1))
        later_ended.set()
        return ShardResult(task.filename, task.split, task.index, 1, task.index + 1)

    monkeypatch.setattr(execute, "ThreadPoolExecutor", Watched)
    writer = execute.ShardWriter(body, RunOptions(workers=8), None)
    quiet = lambda items, measured: None  # noqa: E731
    for failing in (False, True):
        out = tmp_path / f"failing-{failing}"
        (out / WORK_DIR).mkdir(parents=True)
        begun.clear()
        release.clear()  # set by the first run's shutdown
        if not failing:
            results = writer._write(body, str(out), tasks, quiet)
            assert [r.index for r in results] == list(range(40))
            for task in tasks:
                data = (out / task.filename).read_bytes()
                assert data == bytes([task.index]) * (task.index + 1)
            continue
        with pytest.raises(InputError, match="cannot be written"):
            writer._write(body, str(out), tasks, quiet)
        written = {p.name for p in out.iterdir() if p.name != WORK_DIR}
        assert written == {tasks[i].filename for i in begun if i != 0}  # whole, no temporary
        # The four writers' first shards and the failing one's next (all waiting): the rest
        # cancelled.
        assert len(begun) <= 5
    assert pools == [4, 4]
