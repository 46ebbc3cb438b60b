"""Record indexes beside the shards, for readers that load TFRecords by offset: NVIDIA DALI's
`fn.readers.tfrecord(index_path=...)` and the PyTorch `tfrecord` package (`TFRecordDataset(...,
index_path)`, which multi-worker loading needs to split a shard).

The format both take: a text file, one line per record, "OFFSET LENGTH", the record's byte
offset in the shard and its framed length (12-byte header, data, 4-byte CRC). Written while the
shard is (`IndexingWriter` reads the framing as it passes), or for an existing shard from its
headers alone (`shard_index`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from feedgpu import storage
from feedgpu.format.records import Writable, masked_crc

INDEX_SUFFIX = ".idx"
_HEADER = 12  # 8-byte length, 4-byte masked CRC of it
_FOOTER = 4  # masked CRC of the data


def index_path(shard_path: str) -> str:
    """Where a shard's index goes: beside it, its name + ".idx"."""
    return shard_path + INDEX_SUFFIX


class IndexingWriter:
    """A `Writable` that passes bytes on and notes where each record starts and how long it
    is, from the length headers in the stream: no record is parsed twice, nothing is re-read.
    """

    def __init__(self, out: Writable) -> None:
        self.out = out
        self.entries: list[tuple[int, int]] = []
        self._written = 0  # bytes passed on
        self._next = 0  # where the next record's header starts
        self._pending = b""  # the first bytes of a length cut across writes

    def write(self, data: bytes, /) -> int:
        start, end = self._written, self._written + len(data)
        if self._pending:  # a length that began in the last write
            self._pending += data[: 8 - len(self._pending)]
            if len(self._pending) == 8:
                self._advance(struct.unpack("<Q", self._pending)[0])
                self._pending = b""
        while not self._pending and self._next + 8 <= end:
            self._advance(struct.unpack_from("<Q", data, self._next - start)[0])
        if not self._pending and self._next < end:  # a length cut by the end of this write
            self._pending = bytes(data[self._next - start :])
        self._written = end
        self.out.write(data)
        return len(data)

    def _advance(self, length: int) -> None:
        size = _HEADER + length + _FOOTER
        self.entries.append((self._next, size))
        self._next += size

    def index_bytes(self) -> bytes:
        """The index file's contents."""
        if self._next != self._written:
            raise ValueError("the stream ended inside a record: no index for a partial shard")
        return "".join(f"{offset} {size}\n" for offset, size in self.entries).encode()


def shard_index(path: str) -> Iterator[tuple[int, int]]:
    """(offset, framed length) of each record of an existing shard, from its length headers
    (each checked against its CRC), seeking past the data.

    Raises:
        ValueError: a damaged or truncated header.
    """
    with storage.open_file(path, "rb") as f:
        offset = 0
        while header := f.read(_HEADER):
            if len(header) < _HEADER:
                raise ValueError(f"{path}: truncated record header at byte {offset}")
            (length,) = struct.unpack_from("<Q", header)
            if struct.unpack_from("<I", header, 8)[0] != masked_crc(header[:8]):
                raise ValueError(f"{path}: damaged record header at byte {offset}")
            size = _HEADER + length + _FOOTER
            f.seek(offset + size)
            yield offset, size
            offset += size


def write_index(shard: str) -> str:
    """Index an existing shard, written atomically beside it; its path."""
    text = "".join(f"{o} {s}\n" for o, s in shard_index(shard)).encode()
    path = index_path(shard)
    storage.write_atomic(path, text)
    return path


def read_index(path: str) -> list[tuple[int, int]]:
    """An index file's entries."""
    lines = storage.read_bytes(path).decode().split()
    return [(int(a), int(b)) for a, b in zip(lines[::2], lines[1::2], strict=True)]


def index_dataset(out_dir: str, quiet: bool = True) -> list[str]:
    """Write the record index of every shard of a converted dataset that has none, and name
    them in its manifest; returns the indexes written. Reads only the records' headers.

    Raises:
        DatasetError: out_dir has no readable manifest.
        ValueError: a shard with a damaged record header (run `feedgpu verify`).
    """
    from dataclasses import replace

    from feedgpu.format.manifest import SplitInfo, read_manifest
    from feedgpu.progress import progress_bar

    manifest = read_manifest(out_dir)
    written: list[str] = []
    splits = {}
    shards = sum(len(split.shards) for split in manifest.splits.values())
    with progress_bar(total=shards, unit="shard", disable=quiet) as bar:
        for name, split in manifest.splits.items():
            infos = []
            for shard in split.shards:
                path = storage.join(out_dir, shard.file)
                if shard.index is None or not storage.exists(storage.join(out_dir, shard.index)):
                    write_index(path)
                    written.append(index_path(shard.file))
                infos.append(replace(shard, index=index_path(shard.file)))
                bar.update(1)
            splits[name] = SplitInfo(tuple(infos))
    replace(manifest, splits=splits).write(out_dir)  # last: it names the files now there
    return written
