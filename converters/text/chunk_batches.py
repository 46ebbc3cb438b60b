"""A chunk's batches handed to the tokenizer threads as they are read, their results taken back
in order; and while a chunk's last batches are tokenized, the next chunk's read and handed on.

Chunk by chunk, each chunk's end left a core idle: its last batch tokenized on one thread while
the other waited, then its pool of threads started again and its first batch read before any
thread had work (4.5 and 7.2 ms idle on the two threads at a 48 MB corpus's one chunk
boundary, of ~0.35 s: benchmarks/RESULTS.md, "Issue 29, eleventh session"). A chunk is still
written whole before the next: only reading and tokenizing run ahead, so the shards' bytes and
the chunks' markers are those of one chunk at a time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from feedgpu.convert.plan import Skip
from feedgpu.converters.text.batches import Batch

# Submits a batch to the tokenizer threads: its future, and whether it takes the compiled road.
Submit = Callable[[Batch], tuple["Future[Any]", bool]]


class ChunkBatches:
    """One chunk's batches, each handed on as read (`feed`), their results taken in order.

    Args:
        index: the chunk's.
        batches: its batches as `iter_batches` reads them, appending skips to skips.
        skips: the chunk's skips so far (the reading's, then its batches').
    """

    def __init__(self, index: int, batches: Iterator[Batch], skips: list[Skip]) -> None:
        self.index = index
        self.skips = skips
        self.pending: deque[tuple[Batch, Future[Any]]] = deque()
        self.fast_used = False  # a batch took the compiled road (redone if the parity check fails)
        self.read_all = False
        self._batches = batches
        # --strict: a skip while reading (or any error reading), raised in turn: one met while
        # reading ahead comes after the chunk before is written.
        self._error: Exception | None = None

    def feed(self, submit: Submit) -> None:
        """The next batch read and submitted; read_all at the chunk's end (or at an error
        reading, a --strict skip among them, kept until `take` reaches it: the chunk before is
        written first)."""
        try:
            batch = next(self._batches, None)
        except Exception as e:  # raised by `take`, in its turn
            self._error, self.read_all = e, True
            return
        if batch is None:
            self.read_all = True
            return
        future, fast = submit(batch)
        self.fast_used |= fast
        self.pending.append((batch, future))

    @property
    def complete(self) -> bool:
        """Every batch read (no error reading)."""
        return self.read_all and self._error is None

    def take(self, wait: bool) -> tuple[Batch, Any] | None:
        """The first batch still pending and its result (its skips added), if done or wait;
        None if not done or none is left.

        Raises:
            InputError: --strict: the first skip, in a batch or (its batches done) the
                reading (or any other error reading, in its turn too).
        """
        if not self.pending:
            if self._error is not None and self.read_all:
                raise self._error
            return None
        batch, future = self.pending[0]
        if not (wait or future.done()):
            return None
        self.pending.popleft()
        found, encoded = future.result()
        self.skips.extend(found)
        return batch, encoded

    def drop(self) -> None:
        """Its batches in flight waited for and forgotten (the chunk is redone)."""
        for _, future in self.pending:
            future.exception()
        self.pending.clear()


def run_batches(
    current: ChunkBatches,
    submit: Submit,
    emit: Callable[[Batch, Any], None],
    limit: int,
    ahead: Callable[[], ChunkBatches | None] | None = None,
) -> ChunkBatches | None:
    """Every batch of current read, submitted and emitted in order (emit: a batch and its
    result), at most limit + 1 in flight (one is read before the first is waited for); once
    current is read, the next chunk's (ahead() starts its reading, or None: no next chunk to
    read) are read and submitted too, within the same limit. The next chunk's reading, if
    begun.

    Raises:
        InputError: --strict: current's first skip (every batch before it emitted); any
            other error met reading current, in its turn too.
    """
    following: ChunkBatches | None = None

    def in_flight() -> int:
        return len(current.pending) + (len(following.pending) if following else 0)

    while not current.read_all or current.pending:
        idle = False
        if not current.read_all:
            current.feed(submit)
        elif following is not None and not following.read_all and in_flight() <= limit:
            following.feed(submit)
        else:
            idle = True  # nothing to read: wait for the first result
        if ahead is not None and current.complete:
            following, ahead = ahead(), None
        while found := current.take(wait=idle or in_flight() > limit):
            if len(found[0]):  # else every line skipped
                emit(*found)
            idle = False
    current.take(wait=True)  # a --strict skip while reading, after every batch before it
    return following
