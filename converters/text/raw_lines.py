"""A JSONL file's lines as read, in blocks: each block's bytes whole and where its lines end.

The reading thread only reads (and the tokenizer threads parse, `sources.parse_lines`): it
holds a block as one `bytes` and its line bounds (int64 numpy), not a `bytes` a line. Read by
`readlines`, short documents' lines and the sizes counted from them were most of that
thread's time, and every line an object made and freed (benchmarks/RESULTS.md, "Decisions").
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from feedgpu.converters.text.native import native_module

# A block of JSON lines as read: its bytes bound what the reading thread holds at once (long
# documents make blocks of fewer lines). Batches are cut from the lines whatever the blocks.
BLOCK_LINES = 8192
BLOCK_BYTES = 1 << 20


@dataclass(frozen=True, eq=False)  # no == of numpy bounds
class RawLines:
    """Consecutive lines of one JSONL file, as read: line i is data[ends[i]:ends[i + 1]]
    (its newline included), the lines numbered from `number` in their file.

    Attributes:
        rel: the file, as the source lists it.
        number: the first line's number in its file.
        data: bytes holding the lines (blocks cut from one read share it).
        ends: int64 numpy, the first line's start then each line's end.
    """

    rel: str
    number: int
    data: bytes
    ends: Any

    def __len__(self) -> int:
        return len(self.ends) - 1

    def line(self, i: int) -> bytes:
        return self.data[self.ends[i] : self.ends[i + 1]]

    def lines(self, start: int = 0, end: int | None = None) -> list[bytes]:
        """Lines start..end as bytes, for Python's path."""
        bounds = self.ends[start : (len(self) if end is None else end) + 1].tolist()
        return [self.data[a:b] for a, b in itertools.pairwise(bounds)]


def read_blocks(
    f: IO[bytes], limit: int | None = None, size: int | None = None
) -> Iterator[tuple[bytes, Any] | int]:
    """A file's whole lines, about BLOCK_BYTES at a time: the bytes, and the lines' bounds in
    them (`RawLines.ends`, which may end before the bytes do). The last line may lack its
    newline; a line longer than a read waits for its end, but a line over limit bytes (at least
    BLOCK_BYTES: a line within one read is not measured) is never held: in its place comes
    its size (an int; over limit, as far as it was read).

    A block is the bytes read, whole: cut at its last newline, each block's bytes were copied
    once more. A plain file's part line after it is read again with the next block; a gzip
    file's (whose seeking back decompresses from its start) and a stream's (a remote file) are
    joined to the next read. size: read that many bytes at most (a span of whole lines)."""
    parts: list[Any] = []  # the start of a line longer than the reads so far
    held = 0  # their bytes
    skipped = -1  # the bytes so far of a line over limit, not held; -1: none
    again = isinstance(f, io.BufferedReader) and f.seekable()  # a plain file, not a pipe
    left = -1 if size is None else size  # bytes still to read; -1: to the end
    while left and (chunk := f.read(BLOCK_BYTES if left < 0 else min(BLOCK_BYTES, left))):
        left -= len(chunk) if left > 0 else 0
        at = 0  # where this read's bytes still to place begin
        if skipped >= 0 or parts:
            end = chunk.find(b"\n") + 1
            line = max(skipped, held) + (end or len(chunk))
            if skipped >= 0 or (limit is not None and line > limit):
                parts, held, skipped = [], 0, line
                if not end:
                    continue
                yield skipped
                skipped, at = -1, end
        cut = chunk.rfind(b"\n", at) + 1
        if not cut:
            parts.append(memoryview(chunk)[at:])
            held += len(chunk) - at
            if limit is not None and held > limit:
                parts, held, skipped = [], 0, held
            continue
        if parts:  # a line longer than the reads before it
            data, bound = b"".join([*parts, memoryview(chunk)[:cut]]), None
        else:
            data, bound = (chunk[at:], cut - at) if at else (chunk, cut)
        parts, held = [], 0
        if cut < len(chunk):
            if again:
                f.seek(cut - len(chunk), io.SEEK_CUR)
                left += len(chunk) - cut if left >= 0 else 0
            else:
                parts, held = [chunk[cut:]], len(chunk) - cut
        yield data, line_bounds(data, bound)
    if skipped >= 0:
        yield skipped
    elif parts:
        data = b"".join(parts)
        yield data, line_bounds(data)


def line_bounds(data: bytes, size: int | None = None) -> Any:
    """Where each line of data[:size] (of data: size None) starts and the last ends, int64
    numpy (lines end after b"\\n", as `readlines` cuts them). By the compiled step (memchr)
    where built; numpy, which compares every byte, where not."""
    import numpy as np

    size = len(data) if size is None else size
    step = native_module("_records")
    if step is not None:
        return np.frombuffer(step.line_ends(data, size), np.int64)
    newlines = np.flatnonzero(np.frombuffer(data, np.uint8, size) == 10) + 1
    last = [size] if size and (not len(newlines) or newlines[-1] != size) else []
    return np.concatenate([[0], newlines, last]).astype(np.int64)


def line_cuts(path: str, every: int) -> list[tuple[int, int]]:
    """Where a file's parts of about every bytes begin, each at a line's start: (byte, number
    of the line there), from (0, 1). One pass over the file, counting newlines at C speed."""
    cuts, line, at, target = [(0, 1)], 1, 0, every
    with open(path, "rb") as f:
        while block := f.read(BLOCK_BYTES):
            while at + len(block) > target:  # a cut after the first newline at target or later
                nl = block.find(b"\n", max(0, target - at))
                if nl < 0:
                    break
                line_at = line + block.count(b"\n", 0, nl + 1)
                cuts.append((at + nl + 1, line_at))
                target = at + nl + 1 + every
            line += block.count(b"\n")
            at += len(block)
    return cuts
