"""Planning shards and writing them: seeded assignment, atomic writes, the local process pool.

A conversion is a list of independent `ShardTask`s. Each task is written by exactly one process,
whole, under a temporary name and renamed when complete, so a killed run leaves only complete
shards behind, and the same task always produces the same bytes whoever runs it.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import random
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from feedgpu import storage
from feedgpu.errors import InputError
from feedgpu.format.records import RecordError, read_records, write_record

logger = logging.getLogger(__name__)

# Several files per split even for small datasets: parallel interleave reads several files at
# once, per-epoch file shuffling needs more than one, and each training host takes whole files.
MIN_SHARDS = 16
MIN_SHARD_BYTES = 4 << 20
WORK_DIR = ".feedgpu-work"


@dataclass(frozen=True)
class Skip:
    """An input that did not become an example.

    Attributes:
        path: the input, relative to the source folder.
        reason: a short category, counted in the manifest ("truncated", "not an image", ...).
        detail: what exactly was wrong, for the user.
    """

    path: str
    reason: str
    detail: str = ""


class SkipItem(Exception):
    """Raised by a processor for an input it cannot convert."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


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


@dataclass(frozen=True)
class ShardTask:
    """One output file and the inputs that go into it, in order."""

    split: str
    index: int
    num_shards: int
    filename: str
    items: tuple[Any, ...]


class Summary:
    """Count, sum, min, max and a quarter-octave histogram for each named statistic.

    Kept as sums and bucket counts so that shard summaries merge exactly whatever the
    number of workers.
    """

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self.data: dict[str, dict[str, Any]] = json.loads(json.dumps(data or {}))
        for s in self.data.values():  # to_json's [edge, count] pairs back to a dict
            if isinstance(s.get("hist"), list):
                s["hist"] = {str(edge): n for edge, n in s["hist"]}

    @staticmethod
    def bucket(value: float) -> int:
        """Upper edge of value's histogram bucket: quarter-octave steps, rounded up."""
        if value <= 1:
            return 1 if value > 0 else 0
        return math.ceil(2 ** (math.ceil(math.log2(value) * 4) / 4))

    def add_counts(self, key: str, counts: Mapping[Any, int]) -> None:
        """Record `n` examples of each value at once."""
        for value, n in sorted(counts.items()):
            if n <= 0:
                continue
            s = self.data.setdefault(key, {"count": 0, "sum": 0, "min": value, "max": value})
            s["count"] += n
            s["sum"] += value * n
            s["min"], s["max"] = min(s["min"], value), max(s["max"], value)
            hist = s.setdefault("hist", {})
            edge = str(self.bucket(value))
            hist[edge] = hist.get(edge, 0) + n

    def merge(self, other: Summary) -> None:
        """Fold another summary into this one."""
        for key, o in other.data.items():
            s = self.data.get(key)
            if s is None:
                self.data[key] = json.loads(json.dumps(o))
                continue
            s["count"] += o["count"]
            s["sum"] += o["sum"]
            s["min"], s["max"] = min(s["min"], o["min"]), max(s["max"], o["max"])
            for edge, n in o.get("hist", {}).items():
                s["hist"][edge] = s["hist"].get(edge, 0) + n

    def to_json(self) -> dict[str, Any]:
        """Summaries with means; the histogram as [upper edge, count] pairs in edge order."""
        out = {}
        for key, s in sorted(self.data.items()):
            hist = s.get("hist", {})
            pairs = sorted(
                [int(edge), n] for edge, n in (hist.items() if isinstance(hist, dict) else hist)
            )
            mean = s["sum"] / s["count"] if s["count"] else 0
            out[key] = {**s, "mean": round(mean, 4), "hist": pairs}
        return out


@dataclass
class ShardResult:
    """What writing one shard produced; saved beside the work so a resumed run needs no re-read."""

    filename: str
    split: str
    index: int
    num_records: int
    num_bytes: int
    skips: list[Skip] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form."""
        return {**asdict(self), "skips": [asdict(s) for s in self.skips]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ShardResult:
        """Inverse of to_json."""
        return cls(**{**data, "skips": [Skip(**s) for s in data["skips"]]})


def count_shards(total_bytes: float, target_shard_bytes: float, num_shards: int | None) -> int:
    """Shards for a split: as asked, else by size, but several even for small data (see
    MIN_SHARDS)."""
    if num_shards is not None:
        return max(1, num_shards)
    by_size = math.ceil(total_bytes / target_shard_bytes)
    by_parallelism = min(MIN_SHARDS, math.ceil(total_bytes / MIN_SHARD_BYTES))
    return max(1, by_size, by_parallelism)


def plan_shards(
    items: Sequence[Any],
    *,
    name: str,
    split: str,
    total_bytes: int,
    target_shard_bytes: int,
    num_shards: int | None,
    seed: int,
) -> list[ShardTask]:
    """Spread a split's items over shards: a seeded shuffle, then equal contiguous runs.

    The shuffle means every shard mixes classes and sources, so reading a few shards gives a
    representative sample; the seed makes the assignment, and so the bytes, repeatable.
    """
    if not items:
        return []
    num_shards = count_shards(total_bytes, target_shard_bytes, num_shards)
    num_shards = max(1, min(num_shards, len(items)))
    order = list(items)
    random.Random(f"{seed}/{split}").shuffle(order)
    n = len(order)
    from feedgpu.format.layout import shard_filename

    return [
        ShardTask(
            split=split,
            index=i,
            num_shards=num_shards,
            filename=shard_filename(name, split, i, num_shards),
            items=tuple(order[i * n // num_shards : (i + 1) * n // num_shards]),
        )
        for i in range(num_shards)
    ]


def sidecar_path(out_dir: str, filename: str) -> str:
    """Where a finished shard's `ShardResult` is kept until the manifest is written."""
    return storage.join(out_dir, WORK_DIR, f"{filename}.json")


def load_finished(out_dir: str, task: ShardTask) -> ShardResult | None:
    """The result of a shard a previous run completed, or None if it must be (re)written."""
    side = sidecar_path(out_dir, task.filename)
    final = storage.join(out_dir, task.filename)
    if not (storage.exists(side) and storage.exists(final)):
        return None
    try:
        result = ShardResult.from_json(json.loads(storage.read_bytes(side)))
    except (ValueError, TypeError, KeyError):
        return None
    # Re-read it: CRCs and count must match, so a shard damaged by a power loss or a disk error
    # after its rename is rewritten instead of trusted.
    try:
        with storage.open_file(final, "rb") as f:
            count = sum(1 for _ in read_records(f))
    except (RecordError, OSError):
        return None
    return result if count == result.num_records else None


Progress = Callable[[int, int], None]


def write_shard(
    task: ShardTask,
    processor: ShardProcessor,
    out_dir: str,
    *,
    strict: bool,
    progress: Progress | None = None,
) -> ShardResult:
    """Write one shard atomically and record its result beside it.

    The shard is streamed to a temporary name (memory does not grow with shard size), its
    result is saved, and only then is it renamed to its final name. Nothing is fsynced here:
    a kill loses no written data, a resume re-reads finished shards (`load_finished`), and the
    whole dataset is flushed once before its manifest is written.

    Raises:
        InputError: with strict, at the first input that cannot be converted.
    """
    final = storage.join(out_dir, task.filename)
    tmp = f"{final}.tmp-{os.getpid()}"
    result = ShardResult(task.filename, task.split, task.index, 0, 0)
    values: dict[str, Counter[float]] = defaultdict(Counter)  # summarised once, at the end
    parent = os.getppid()
    pending_items = pending_bytes = 0
    with storage.create_streamed(tmp) as f:
        for item in task.items:
            if pending_items >= 16:  # report in batches: progress must not cost per-item work
                if os.getppid() != parent:  # the converting process died: stop, leave no shard
                    os._exit(1)
                if progress:
                    progress(pending_items, pending_bytes)
                pending_items = pending_bytes = 0
            try:
                records, stats = processor.process(item)
            except SkipItem as e:
                path = processor.item_path(item)
                if strict:
                    f.close()
                    storage.remove(tmp)
                    raise InputError(f"cannot convert {path}: {e} (stopped by --strict)") from None
                result.skips.append(Skip(path, e.reason, e.detail))
            else:
                for record in records:
                    result.num_bytes += write_record(f, record)
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
    storage.write_atomic(
        sidecar_path(out_dir, task.filename), json.dumps(result.to_json()).encode()
    )
    storage.replace(tmp, final)
    return result


# Per-worker state, set once by the pool initializer rather than pickled with every task.
_worker: dict[str, Any] = {}


def _init_worker(processor: ShardProcessor, out_dir: str, strict: bool, progress: Any) -> None:
    _worker.update(processor=processor, out_dir=out_dir, strict=strict, progress=progress)
    processor.warm_up()


def _count(items: int, num_bytes: int) -> None:
    _worker["progress"].put((items, num_bytes))


def _run_task(task: ShardTask) -> ShardResult:
    return write_shard(
        task, _worker["processor"], _worker["out_dir"], strict=_worker["strict"], progress=_count
    )


def default_workers() -> int:
    """The CPUs this process may use (cgroup and affinity aware where Python tells)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class ShardPool:
    """Worker processes that write whole shards; a context manager that stops them on exit.

    Start it before listing the source: the workers start and load their decoders
    (`ShardProcessor.warm_up`) on the other cores while this process lists and plans.
    Workers are forked when this process is single-threaded (fast, and scripts need no
    `__main__` guard); when other threads run, as they do once TensorFlow is loaded, forking is
    unsafe and workers are spawned.
    """

    def __init__(
        self, processor: ShardProcessor, out_dir: str, *, workers: int, strict: bool
    ) -> None:
        self.processor, self.out_dir, self.strict = processor, out_dir, strict
        self._pool: Any = None
        if workers > 1:
            safe_to_fork = threading.active_count() == 1 and "tensorflow" not in sys.modules
            fork = safe_to_fork and os.name == "posix"
            ctx = multiprocessing.get_context("fork" if fork else "spawn")
            # Progress reports (every 16 items) on a queue: the Pool's own kind, so no
            # shared-memory machinery (ctypes, a heap) is loaded for a counter.
            self._progress = ctx.SimpleQueue()
            self._pool = ctx.Pool(
                workers,
                initializer=_init_worker,
                initargs=(processor, out_dir, strict, self._progress),
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

    def run(self, tasks: Iterable[ShardTask], on_progress: Progress) -> list[ShardResult]:
        """Write every task's shard; in the workers unless there is one task or one worker.

        Tasks with the most input bytes start first, so the last few do not leave cores idle.
        """
        pending = sorted(tasks, key=lambda t: -sum(map(self.processor.item_bytes, t.items)))
        if self._pool is None or len(pending) <= 1:
            return [
                write_shard(
                    t, self.processor, self.out_dir, strict=self.strict, progress=on_progress
                )
                for t in pending
            ]
        reports = self._progress
        results: list[ShardResult] = []
        futures = [self._pool.apply_async(_run_task, (t,)) for t in pending]
        while futures:
            futures[0].wait(0.1)  # wakes as soon as the oldest task ends, else refreshes progress
            done = [f for f in futures if f.ready()]
            for f in done:
                futures.remove(f)
                results.append(f.get())  # re-raises a worker's InputError here
                # Flush finished shards while the workers compute, not all at the end.
                storage.sync_files([storage.join(self.out_dir, results[-1].filename)])
            items = measured = 0
            while not reports.empty():  # a worker reports before its task's result is sent
                more_items, more_bytes = reports.get()
                items, measured = items + more_items, measured + more_bytes
            on_progress(items, measured)
        return results
