"""A text chunk's output: piece files, one per (split, shard), with their statistics; packing;
the shard body that concatenates a shard's pieces; and the manifest's text statistics.

A shard is its pieces in chunk order, so its bytes do not depend on how many threads tokenized.
"""

from __future__ import annotations

import shutil
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from feedgpu import storage
from feedgpu.convert.commit import Progress, ShardResult
from feedgpu.convert.plan import ShardTask
from feedgpu.convert.summary import Summary
from feedgpu.converters.text.records import Made, Packer
from feedgpu.format.manifest import TextStatistics
from feedgpu.format.records import Writable

WASTE_LENGTHS = (64, 128, 256, 512, 1024)


class ChunkWriter:
    """One chunk's records onto its shards' pieces (a file per shard in folder), with their
    statistics.

    Args:
        folder: where the chunk's piece files go.
        names: each shard's piece key ("train-00003"), by shard index.
        packer: --pack's, or None.
    """

    def __init__(self, folder: str, names: Sequence[str], packer: Packer | None) -> None:
        self.folder, self.names, self.packer = folder, names, packer
        self.handles: dict[str, Any] = {}
        self.pieces: dict[str, dict[str, Any]] = {}
        self.lengths: defaultdict[str, Counter[int]] = defaultdict(Counter)
        self.sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # docs, ids, unknown

    def put_framed(self, key: str, data: bytes | memoryview, records: int) -> None:
        """Records framed as TFRecords (data; how many it holds) onto one piece."""
        if isinstance(data, memoryview) and storage.is_remote(self.folder):
            data = bytes(data)  # tf.io.gfile writes bytes only
        if key not in self.handles:
            path = storage.join(self.folder, f"{key}.rec")
            self.handles[key] = storage.open_file(path, "wb")
            self.pieces[key] = {"records": 0, "bytes": 0}
        self.handles[key].write(data)
        self.pieces[key]["bytes"] += len(data)
        self.pieces[key]["records"] += records

    def _put(self, data: bytes, groups: Sequence[tuple[int, int, int]]) -> None:
        view, start = memoryview(data), 0
        for shard, end, records in groups:
            self.put_framed(self.names[shard], view[start:end], records)
            start = end

    def _count(self, doc_shards: Any, full: Any, unknown: Any, shards: Any, stored: Any) -> None:
        """Documents as tokenized (shard, ids with special ids, unknown ids) and the stored
        examples' exact lengths (what the pipeline's buckets come from), by shard."""
        import numpy as np

        for row, weights in enumerate((None, full, unknown)):
            sums = np.bincount(doc_shards, weights=weights, minlength=len(self.names))
            for i in np.flatnonzero(sums).tolist():
                self.sums[self.names[i]][row] += int(sums[i])
        width = int(stored.max()) + 1 if len(stored) else 1
        pairs, counts = np.unique(shards * width + stored, return_counts=True)
        for pair, n in zip(pairs.tolist(), counts.tolist(), strict=True):
            self.lengths[self.names[pair // width]][pair % width] += n

    def put(self, made: Made) -> int:
        """A batch's records (`RecordMaker`'s) with their statistics; its tokens."""
        self._put(made.data, made.groups)
        self._count(made.doc_shards, made.full, made.unknown, made.example_shards, made.stored)
        return int(made.full.sum())

    def pack(
        self, doc_shards: Any, full: Any, unknown: Any, grouped: Any, first: Any, ends: Any
    ) -> int:
        """A batch's documents packed (`RecordMaker.packed`'s); its tokens."""
        assert self.packer is not None
        data, groups, shards, real = self.packer.add(grouped, first, ends)
        self._put(data, groups)
        self._count(doc_shards, full, unknown, shards, real)
        return int(full.sum())

    def close(self) -> dict[str, Any]:
        import numpy as np

        if self.packer is not None:
            data, groups, shards, real = self.packer.close()
            self._put(data, groups)
            none = np.zeros(0, np.int64)
            self._count(none, none, none, shards, real)
        for handle in self.handles.values():
            handle.close()
        return {
            k: {
                **v,
                "lengths": dict(sorted(self.lengths[k].items())),
                "documents": self.sums[k][0],
                "doc_tokens": self.sums[k][1],
                "unknown": self.sums[k][2],
            }
            for k, v in self.pieces.items()
        }


class PieceShardBody:
    """A text shard's records: its pieces, concatenated in chunk order (a `ShardBody`); a
    shard of one piece is that file, renamed (`prepared`).

    Attributes:
        work: the run's work folder, holding each chunk's piece folder.
        infos: each chunk's marker (its folder, and per piece: records, bytes, lengths).
        blocks: records hold blocks of documents: the shard's examples are its documents.
    """

    def __init__(self, work: str, infos: list[dict[str, Any]], blocks: bool = False) -> None:
        self.work, self.infos, self.blocks = work, infos, blocks

    def paths(self, key: str) -> list[str]:
        """The piece files of a shard (its key), in chunk order."""
        pieces = (info for info in self.infos if info.get("pieces", {}).get(key))
        return [storage.join(self.work, info["folder"], f"{key}.rec") for info in pieces]

    def __call__(self, task: ShardTask, out: Writable, progress: Progress | None) -> ShardResult:
        for path in self.paths(piece_key(task.split, task.index)):
            with storage.open_file(path, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
        return self._result(task)

    def prepared(self, task: ShardTask) -> tuple[str, ShardResult] | None:
        """The file holding the shard whole (its one piece), and its result; None if it is to
        be written (an indexed shard's index is made as it is written)."""
        paths = self.paths(piece_key(task.split, task.index))
        if task.indexed or len(paths) != 1:
            return None
        return paths[0], self._result(task)

    def _result(self, task: ShardTask) -> ShardResult:
        key = piece_key(task.split, task.index)
        result = ShardResult(task.filename, task.split, task.index, 0, 0)
        pieces = [p for info in self.infos if (p := info.get("pieces", {}).get(key))]
        for piece in pieces:  # no statistics: the stage gives them whole (`length_summary`)
            result.num_records += piece["records"]
            result.num_bytes += piece["bytes"]
        if self.blocks:
            result.num_examples = sum(piece["documents"] for piece in pieces)
        return result


def piece_key(split: str, index: int) -> str:
    """A shard's key among a chunk's pieces: "train-00003"."""
    return f"{split}-{index:05d}"


def merge_lengths(pieces: list[dict[str, Any]]) -> Counter[int]:
    """Pieces' exact length counts, summed (keys are str in a marker read back: JSON)."""
    total: Counter[int] = Counter()
    for piece in pieces:
        total.update({int(k): n for k, n in piece["lengths"].items()})
    return total


def length_summary(text: TextStatistics) -> dict[str, Any]:
    """The manifest's statistics of the stored examples (`Summary.to_json`): their lengths,
    from every chunk's exact counts at once."""
    summary = Summary()
    summary.add_counts("example_length", dict(text.length_counts))
    return summary.to_json()


def text_statistics(pieces: list[dict[str, Any]]) -> TextStatistics:
    """What is stored: documents, ids, padding waste at fixed lengths and the exact length
    counts of the stored examples (after --max-length, --stride or --pack: what the pipeline
    pads and buckets); the unknown-token rate is over the documents as tokenized."""
    import numpy as np

    lengths = merge_lengths(pieces)
    stored = np.fromiter(lengths.keys(), np.int64, len(lengths))
    counts = np.fromiter(lengths.values(), np.int64, len(lengths))
    count, tokens = int(counts.sum()), int((stored * counts).sum())
    unknown = sum(p["unknown"] for p in pieces)
    tokenized = sum(p["doc_tokens"] for p in pieces)
    waste = {}
    for fixed in WASTE_LENGTHS:  # in numpy: in Python, each a pass over every length
        kept = int((np.minimum(stored, fixed) * counts).sum())
        waste[str(fixed)] = round(1 - kept / (count * fixed), 4) if count else 0.0
    return TextStatistics(
        documents=sum(p["documents"] for p in pieces),
        tokens=tokens,
        unknown_rate=round(unknown / tokenized, 6) if tokenized else 0.0,
        padding_waste_fixed=waste,
        length_counts=tuple(sorted(lengths.items())),
    )
