"""DirectWriter: the exact bytes whatever the write sizes, and the disk's errors, not silence."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from feedgpu.convert import direct_write
from feedgpu.convert.direct_write import BLOCK, DirectWriter


@pytest.mark.parametrize(
    "size", [0, 1, 4095, 4096, 4097, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 17]
)
def test_file_holds_exactly_what_was_written(tmp_path: Path, size: int) -> None:
    rng = random.Random(size)
    data = rng.randbytes(size)
    path = tmp_path / "out.bin"
    with DirectWriter(str(path)) as w:
        pos = 0
        while pos < size:  # writes of every size, from a few bytes to more than a block
            n = rng.choice([1, 7, 4096, 70_000, BLOCK + 5])
            assert w.write(data[pos : pos + n]) == len(data[pos : pos + n])
            pos += n
    assert path.read_bytes() == data


def test_writers_one_after_another_reuse_blocks_without_mixing_data(tmp_path: Path) -> None:
    for i in range(4):
        data = bytes([i]) * (BLOCK + 1000 * i)
        with DirectWriter(str(tmp_path / f"{i}.bin")) as w:
            w.write(data)
        assert (tmp_path / f"{i}.bin").read_bytes() == data
    assert len(direct_write._spare) <= 6  # kept blocks are bounded


def test_writes_the_file_system_refuses_unbuffered_go_through_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An unaligned length: a local disk refuses it with O_DIRECT (EINVAL), so the writer must
    # drop the flag and write it buffered; either way the bytes must be right.
    monkeypatch.setattr(direct_write, "ALIGN", 1)
    data = os.urandom(BLOCK + 100)
    path = tmp_path / "odd.bin"
    with DirectWriter(str(path)) as w:
        w.write(data)
    assert path.read_bytes() == data


def test_a_disk_error_is_raised_not_swallowed() -> None:
    w = DirectWriter("/dev/full")  # every write fails with ENOSPC
    w.write(b"x" * 10)
    with pytest.raises(OSError) as caught:
        try:
            w.write(b"y" * (2 * BLOCK))  # a block went to the disk thread: may fail here already
        finally:
            w.close()
    assert caught.value.errno == errno.ENOSPC
    w.close()  # closing again is a no-op
