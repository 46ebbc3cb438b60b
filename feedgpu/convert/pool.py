"""Shards made of independent inputs (images): the processor protocol, the shard body that runs
each input through it, and the local process pool that writes whole shards on every core."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from feedgpu import storage
from feedgpu.convert.commit import Progress, ShardResult, write_shard
from feedgpu.convert.plan import ShardTask, Skip, SkipItem
from feedgpu.convert.spawn_guard import check_main_guard
from feedgpu.convert.summary import Summary
from feedgpu.errors import InputError
from feedgpu.format.records import Writable, write_record


class ShardProcessor(Protocol):
    """Turns one planned input into serialised examples; picklable, holds options only."""

    def process(self, item: Any) -> tuple[list[bytes], Mapping[str, float]]:
        """Examples for the item and its statistics (e.g. height, width); raises SkipItem."""
        ...

    def item_path(self, item: Any) -> str:
        """The item's path relative to the source, for progress, skips and errors."""
        ...

    def item_bytes(self, item: Any) -> int:
        """Input size of the item, for the MB/s shown while converting."""
        ...

    def warm_up(self) -> None:
        """Load what processing needs (decoders, say) once per worker, before any item."""
        ...


class ItemShardBody:
    """A shard's records: each of its inputs through a processor, in order (a `ShardBody`)."""

    def __init__(self, processor: ShardProcessor, *, strict: bool) -> None:
        self.processor, self.strict = processor, strict

    def __call__(self, task: ShardTask, out: Writable, progress: Progress | None) -> ShardResult:
        """Raises InputError with strict, at the first input that cannot be converted."""
        processor = self.processor
        result = ShardResult(task.filename, task.split, task.index, 0, 0)
        values: dict[str, Counter[float]] = defaultdict(Counter)  # summarised once, at the end
        pending_items = pending_bytes = 0
        for item in task.items:
            if pending_items >= 16 and progress:  # batched: progress must not cost per item
                progress(pending_items, pending_bytes)
                pending_items = pending_bytes = 0
            try:
                records, stats = processor.process(item)
            except SkipItem as e:
                path = processor.item_path(item)
                if self.strict:
                    raise InputError(f"cannot convert {path}: {e} (stopped by --strict)") from None
                result.skips.append(Skip(path, e.reason, e.detail))
            else:
                for record in records:
                    result.num_bytes += write_record(out, record)
                    result.num_records += 1
                for key, value in stats.items():
                    values[key][value] += 1
            pending_items += 1
            pending_bytes += processor.item_bytes(item)
        if progress:
            progress(pending_items, pending_bytes)
        summary = Summary()
        for key, counts in values.items():
            summary.add_counts(key, counts)
        result.stats = summary.to_json()
        return result


# Per-worker state, set once by the pool initializer rather than pickled with every task.
_worker: dict[str, Any] = {}


def _init_worker(body: ItemShardBody, progress: Any) -> None:
    _worker.update(body=body, progress=progress, parent=os.getppid())
    body.processor.warm_up()


def _count(items: int, num_bytes: int) -> None:
    if os.getppid() != _worker["parent"]:
        # The converting process died: this worker stops, and write_shard removes the
        # unfinished file on the way out (SystemExit ends only this pool worker).
        raise SystemExit(1)
    _worker["progress"].put((items, num_bytes))


def _run_task(task: ShardTask, out_dir: str) -> ShardResult:
    return write_shard(task, _worker["body"], out_dir, progress=_count)


class ShardPool:
    """Worker processes that write whole shards; a context manager that stops them on exit.

    Start it before listing the source: the workers start and load their decoders
    (`ShardProcessor.warm_up`) on the other cores while this process lists and plans.
    Workers are forked when this process is single-threaded (fast, and scripts need no
    `__main__` guard); when other threads run, as they do once TensorFlow is loaded, forking is
    unsafe and workers are spawned. With one worker, shards are written in this process
    (TensorFlow's ram:// file system lives in this process only: `RunOptions.for_paths`).
    """

    def __init__(self, body: ItemShardBody, *, workers: int) -> None:
        self.body = body
        self._pool: Any = None
        if workers > 1:
            safe_to_fork = threading.active_count() == 1 and "tensorflow" not in sys.modules
            fork = safe_to_fork and os.name == "posix"
            if not fork:
                check_main_guard()
            ctx = multiprocessing.get_context("fork" if fork else "spawn")
            # Progress reports (every 16 items) on a queue: the Pool's own kind, so no
            # shared-memory machinery (ctypes, a heap) is loaded for a counter.
            self._progress = ctx.SimpleQueue()
            self._pool = ctx.Pool(
                workers, initializer=_init_worker, initargs=(self.body, self._progress)
            )

    def __enter__(self) -> ShardPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (at once: every result wanted has been collected)."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def run(
        self, tasks: Iterable[ShardTask], out_dir: str, on_progress: Progress
    ) -> list[ShardResult]:
        """Write every task's shard; in the workers unless there is one task or one worker.

        Tasks with the most input bytes start first, so the last few do not leave cores idle.
        """
        item_bytes = self.body.processor.item_bytes
        pending = sorted(tasks, key=lambda t: -sum(map(item_bytes, t.items)))
        if self._pool is None or len(pending) <= 1:
            return [write_shard(t, self.body, out_dir, on_progress) for t in pending]
        reports = self._progress
        results: list[ShardResult] = []
        futures = [self._pool.apply_async(_run_task, (t, out_dir)) for t in pending]
        while futures:
            futures[0].wait(0.1)  # wakes as soon as the oldest task ends, else refreshes progress
            done = [f for f in futures if f.ready()]
            for f in done:
                futures.remove(f)
                results.append(f.get())  # re-raises a worker's InputError here
                # Flush finished shards while the workers compute, not all at the end.
                storage.sync_files([storage.join(out_dir, results[-1].filename)])
            items = measured = 0
            while not reports.empty():  # a worker reports before its task's result is sent
                more_items, more_bytes = reports.get()
                items, measured = items + more_items, measured + more_bytes
            on_progress(items, measured)
        return results
