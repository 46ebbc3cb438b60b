"""The one way a shard reaches its final name: written under a temporary name, its result saved
beside it in the work folder, then renamed. Image and text conversions, in the local pool or on
Beam workers, all commit shards here; a resumed run trusts a shard only if it reads back whole.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from feedgpu import storage
from feedgpu.convert.plan import ShardTask, Skip
from feedgpu.format.index import IndexingWriter, index_path
from feedgpu.format.records import RecordError, Writable, read_records

WORK_DIR = ".feedgpu-work"
# Progress reports: (inputs done, the measured amount: bytes read, tokens written).
Progress = Callable[[int, int], None]


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
    num_examples: int | None = None  # when records hold several (blocks of documents)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form."""
        return {**asdict(self), "skips": [asdict(s) for s in self.skips]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ShardResult:
        """Inverse of to_json."""
        return cls(**{**data, "skips": [Skip(**s) for s in data["skips"]]})


class ShardBody(Protocol):
    """Writes one shard's records; picklable, so a pool or Beam worker can run it."""

    def __call__(self, task: ShardTask, out: Writable, progress: Progress | None) -> ShardResult:
        """Write task's records to out; their count, bytes, skips and statistics (none where
        the stage gives the whole run's: `StageOutput.statistics`)."""
        ...


def write_shard(
    task: ShardTask, body: ShardBody, out_dir: str, progress: Progress | None = None
) -> ShardResult:
    """Write one shard atomically and record its result beside it.

    The shard is streamed to a temporary name (memory does not grow with shard size), its
    result is saved, and only then is it renamed to its final name; if writing fails (or the
    process is told to stop) the temporary file is removed. Nothing is fsynced here: a kill
    loses no committed data, a resume re-reads finished shards (`load_finished`), and the whole
    dataset is flushed once before its manifest is written.
    """
    final = storage.join(out_dir, task.filename)
    tmp = f"{final}.tmp-{os.getpid()}"
    indexer: IndexingWriter | None = None
    try:
        with storage.create_streamed(tmp) as f:
            if task.indexed:
                indexer = IndexingWriter(f)
            result = body(task, indexer or f, progress)
    except BaseException:
        storage.remove(tmp)
        raise
    if indexer is not None:  # committed before its shard: a shard never lacks its index
        storage.write_atomic(index_path(final), indexer.index_bytes())
    return adopt_shard(task, tmp, result, out_dir)


def adopt_shard(task: ShardTask, path: str, result: ShardResult, out_dir: str) -> ShardResult:
    """Commit a shard written whole at path (`write_shard`'s temporary file, or a text run's
    one piece of it): its result saved beside it, then the file renamed to its final name."""
    storage.write_atomic(
        sidecar_path(out_dir, task.filename), json.dumps(result.to_json()).encode()
    )
    storage.replace(path, storage.join(out_dir, task.filename))
    return result


def sidecar_path(out_dir: str, filename: str) -> str:
    """Where a finished shard's `ShardResult` is kept until the manifest is written."""
    return storage.join(out_dir, WORK_DIR, f"{filename}.json")


def load_finished(out_dir: str, task: ShardTask) -> ShardResult | None:
    """The result of a shard a previous run completed, or None if it must be (re)written."""
    side = sidecar_path(out_dir, task.filename)
    final = storage.join(out_dir, task.filename)
    if not (storage.exists(side) and storage.exists(final)):
        return None
    if task.indexed and not storage.exists(index_path(final)):
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
