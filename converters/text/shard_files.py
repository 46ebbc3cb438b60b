"""A local text run's shards written as its chunks are tokenized: each chunk's records appended
to one file per shard in the work folder, in chunk order, each file renamed into place at the
end (`commit.adopt_shard`).

Piece files (one per chunk and shard, `pieces.ChunkWriter`'s folders) were concatenated into
the shards after the last chunk: every byte of output copied once more while one core waited,
and the output on disk twice meanwhile. Here a chunk's marker records the bytes it appended to
each shard, so a resumed run cuts each file back to the chunks it keeps and redoes the rest,
with the same bytes. Object stores cannot append or cut, and Beam's workers tokenize chunks
apart: both keep piece folders, which a local run that resumes theirs appends whole.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any

from feedgpu import storage

SUFFIX = ".shard"
_SYNC = ThreadPoolExecutor(1, thread_name_prefix="feedgpu-sync")  # one flush at a time
WRITE_BEHIND = 4 << 20


class ShardFiles:
    """The shards' files of a local run and the bytes the chunks kept so far put in each.

    Args:
        work: the run's work folder (local).
        keys: the shards' piece keys ("train-00003"), those still to be written.
    """

    def __init__(self, work: str, keys: Iterable[str]) -> None:
        self.work = work
        self.sizes = dict.fromkeys(keys, 0)
        self._open: dict[str, IO[bytes]] = {}
        self._syncing: Future[Any] | None = None
        self._unsynced = 0  # bytes appended since the last flush to disk began, to these:
        self._dirty: set[str] = set()

    def path(self, key: str) -> str:
        return os.path.join(self.work, key + SUFFIX)

    def keep(self, info: dict[str, Any]) -> bool:
        """A chunk an earlier run finished (its marker's info): kept if the files hold its
        records after the chunks kept before it (appended now if it wrote a piece folder);
        False if it must be redone (the files lost its bytes)."""
        pieces = {k: p for k, p in info.get("pieces", {}).items() if k in self.sizes}
        self.flush()
        if any(_size(self.path(k)) < self.sizes[k] + p["bytes"] for k, p in pieces.items()):
            if not info.get("folder"):
                return False
            self.begin()  # Beam's piece folder, not yet appended: appended whole
            for key in pieces:
                with open(os.path.join(self.work, info["folder"], key + ".rec"), "rb") as f:
                    shutil.copyfileobj(f, self.handle(key), 1 << 20)
        self.kept(pieces)
        return True

    def kept(self, pieces: dict[str, Any]) -> None:
        """A chunk's pieces (bytes per shard) counted as kept."""
        for key, piece in pieces.items():
            if key in self.sizes:
                self.sizes[key] += piece["bytes"]

    def begin(self) -> None:
        """Before a chunk is written: every file cut back to the chunks kept, so what an
        attempt killed or redone appended after them is gone."""
        for key, size in self.sizes.items():
            handle = self._open.get(key)
            if handle is not None:
                handle.flush()
                if handle.tell() > size:  # appended at its end: tell is its size
                    handle.truncate(size)
            elif _size(self.path(key)) > size:
                os.truncate(self.path(key), size)

    def handle(self, key: str) -> IO[bytes]:
        """The file a shard's records are appended to (a shard not to be written: a scratch
        file of its own, removed with the work folder)."""
        if key not in self._open:
            name = key + SUFFIX if key in self.sizes else key + ".unused"
            self._open[key] = storage.open_file(os.path.join(self.work, name), "ab")
        return self._open[key]

    def flush(self) -> None:
        """Everything appended handed to the OS (a chunk's marker is written after)."""
        for handle in self._open.values():
            handle.flush()

    def appended(self, key: str, size: int) -> None:
        """size bytes were appended to key's file: every WRITE_BEHIND bytes, the files
        appended to since are sent on to the disk in the background (unless the last such
        flush still runs). The shards are flushed before the manifest is written; what is on
        disk by then is not waited for, at the end, while one core idles."""
        if key not in self.sizes:  # a scratch file's bytes are never kept
            return
        self._unsynced += size
        self._dirty.add(key)
        if self._unsynced < WRITE_BEHIND or not (self._syncing is None or self._syncing.done()):
            return
        handles = [self._open[k] for k in self._dirty]
        self._unsynced, self._dirty = 0, set()
        for handle in handles:
            handle.flush()
        self._syncing = _SYNC.submit(_sync, [handle.fileno() for handle in handles])

    def release(self, quiet: bool = False) -> None:
        """Every file closed as it is (a stopped run's: the next cuts them back), once the
        flush to disk that may be using their descriptors ends; the first error raised
        after, unless quiet (a run another error already stops)."""
        syncing, self._syncing = self._syncing, None
        errors: list[BaseException] = []
        failed = syncing.exception() if syncing is not None else None  # waits for it
        if failed is not None:
            errors.append(failed)
        for handle in self._open.values():
            try:
                handle.close()
            except OSError as e:  # its last bytes not written (a full disk)
                errors.append(e)
        self._open.clear()
        if errors and not quiet:
            raise errors[0]

    def close(self) -> None:
        """Every file closed at the chunks' bytes exactly (made, empty, for a shard no chunk
        wrote to): each is its shard."""
        try:
            self.begin()
        except BaseException:
            self.release(quiet=True)
            raise
        self.release()
        for key in self.sizes:
            if not os.path.exists(self.path(key)):
                with open(self.path(key), "ab"):
                    pass


def _sync(fds: list[int]) -> None:
    flush = getattr(os, "fdatasync", os.fsync)  # macOS has fsync only
    for fd in fds:
        flush(fd)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
