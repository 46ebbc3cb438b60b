"""A text chunk's output: piece files, one per (split, shard), with their statistics; packing;
the shard body that concatenates a shard's pieces; and the manifest's text statistics.

A shard is its pieces in chunk order, so its bytes do not depend on how many threads tokenized.
"""

from __future__ import annotations

import shutil
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from feedgpu import storage
from feedgpu.convert.commit import Progress, ShardResult
from feedgpu.convert.plan import ShardTask
from feedgpu.convert.summary import Summary
from feedgpu.converters.text.native import native_module
from feedgpu.converters.text.shard_files import ShardFiles
from feedgpu.format.manifest import TextStatistics
from feedgpu.format.records import Writable, frame_records
from feedgpu.format.schema import Schema

WASTE_LENGTHS = (64, 128, 256, 512, 1024)
# count_batch keeps the stored lengths' counts in an array (a row per shard, a column per
# length) while it has at most this many cells; beyond, they are counted as they come.
DENSE_CELLS = 1 << 16


@dataclass
class ChunkWriter:
    """Piece files of one chunk, one per (split, shard), with their statistics; or with
    files, the chunk's records appended to its shards' files (`shard_files`)."""

    folder: str
    pack: int | None
    pad_id: int
    schema: Schema
    files: ShardFiles | None = None
    handles: dict[str, Any] = field(default_factory=dict)
    pieces: dict[str, dict[str, Any]] = field(default_factory=dict)
    lengths: defaultdict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    documents: Counter[str] = field(default_factory=Counter)
    doc_tokens: Counter[str] = field(default_factory=Counter)
    unknown: Counter[str] = field(default_factory=Counter)
    packers: dict[str, list[list[int]]] = field(default_factory=dict)
    # count_batch's sums until close: per shard (an index into _names) its documents, ids as
    # tokenized and unknown ids (3, shards), and its stored lengths' counts (shards, longest).
    _names: Sequence[str] = ()
    _sums: Any = None
    _histogram: Any = None

    def write(self, key: str, record: bytes) -> None:
        self._append(key, [record])

    def check_first(self, record: bytes) -> None:
        """A record made without `schema.encode` (in-graph, or by a compiled step) checked
        against the schema when it is the chunk's first: decoding a block takes ~0.25 ms and
        its Python checks more, too long for every batch (benchmarks/RESULTS.md, "Issue 29")."""
        if self.schema is not None and not self.pieces:
            self.schema.check_record(record)

    def _append(self, key: str, records: Sequence[bytes]) -> None:
        """Records onto one piece: one framed write."""
        step = native_module("_records")  # the same bytes, CRC32C by the CPU's instruction
        data = step.frame(records) if step is not None else frame_records(records)
        self.put_framed(key, data, len(records))

    def put_framed(self, key: str, data: bytes | memoryview, records: int) -> None:
        """Records framed as TFRecords (data; how many it holds) onto one piece."""
        if isinstance(data, memoryview) and self.files is None and storage.is_remote(self.folder):
            data = bytes(data)  # tf.io.gfile writes bytes only
        if key not in self.handles:
            if self.files is not None:  # appended to its shard's file
                self.handles[key] = self.files.handle(key)
            else:
                path = storage.join(self.folder, f"{key}.rec")
                self.handles[key] = storage.open_file(path, "wb")
            self.pieces[key] = {"records": 0, "bytes": 0}
        size = len(data)
        self.handles[key].write(data)
        if self.files is not None:
            self.files.appended(key, size)
        self.pieces[key]["bytes"] += size
        self.pieces[key]["records"] += records

    def write_routed(self, names: Sequence[str], shards: Any, records: Sequence[bytes]) -> None:
        """A batch's records, each onto the piece of its shard (an index into names), in order."""
        import numpy as np

        if not len(shards):
            return
        order = np.argsort(shards, kind="stable")
        ordered = shards[order]
        cuts = (np.flatnonzero(np.diff(ordered)) + 1).tolist()
        positions = order.tolist()
        for start, end in zip([0, *cuts], [*cuts, len(positions)], strict=True):
            group = [records[i] for i in positions[start:end]]
            self._append(names[int(ordered[start])], group)

    def count_document(self, key: str, length: int, unknown: int) -> None:
        """A document as tokenized (special tokens included): for the unknown-token rate."""
        self.documents[key] += 1
        self.doc_tokens[key] += length
        self.unknown[key] += unknown

    def count_batch(
        self, names: Sequence[str], shards: Any, full: Any, unknown: Any, stored: Any
    ) -> None:
        """A batch of one-example documents (int64 numpy per document: shard index into names,
        ids as tokenized, unknown ids, ids stored): `count_document` and the stored lengths'
        exact counts (what the pipeline's buckets come from), summed in arrays until `close`:
        merged into the counters batch by batch, they took 14 ms of a 50 MB short-document
        conversion (48 batches) on the thread that reads and writes, holding the GIL."""
        import numpy as np

        if not len(shards):
            return
        if self._sums is None:  # the first batch
            self._names = names
            self._sums = np.zeros((3, len(names)), np.int64)
            self._histogram = np.zeros((len(names), 0), np.int64)
        for row, weights in enumerate((None, full, unknown)):
            self._sums[row] += np.bincount(shards, weights=weights, minlength=len(names)).astype(
                np.int64
            )
        width = max(int(stored.max()) + 1, self._histogram.shape[1])
        if len(names) * width > DENSE_CELLS:  # long documents (few a batch) or many shards
            pairs, counts = np.unique(shards * width + stored, return_counts=True)
            for pair, n in zip(pairs.tolist(), counts.tolist(), strict=True):
                self.lengths[names[pair // width]][pair % width] += n
            return
        if width > self._histogram.shape[1]:
            grown = np.zeros((len(names), width), np.int64)
            grown[:, : self._histogram.shape[1]] = self._histogram
            self._histogram = grown
        self._histogram += np.bincount(
            shards * width + stored, minlength=len(names) * width
        ).reshape(len(names), width)

    def _flush_counts(self) -> None:
        """count_batch's arrays into the counters."""
        import numpy as np

        if self._sums is None:
            return
        for i, (docs, tokens, unknown) in enumerate(self._sums.T.tolist()):
            if docs:
                key = self._names[i]
                self.documents[key] += docs
                self.doc_tokens[key] += tokens
                self.unknown[key] += unknown
        # A shard's counts at once (a mapping's update: C's where its Counter is still empty,
        # as in a batch of one-example documents), not one length at a time: 6 shards of
        # ~1,500 lengths: the last chunk's `close` 1.5 -> 0.8 ms (benchmarks/RESULTS.md, "Issue
        # 29, twelfth session").
        for i in np.flatnonzero(self._histogram.any(axis=1)).tolist():
            row = self._histogram[i]
            stored = np.flatnonzero(row)
            counts = zip(stored.tolist(), row[stored].tolist(), strict=True)
            self.lengths[self._names[i]].update(dict(counts))
        self._sums = self._histogram = None
        self._names = ()

    def add(self, key: str, ids: Any, extra: dict[str, Any]) -> None:
        """One example's ids (with special tokens): written, or into the packer."""
        if self.pack is None:
            self.write(key, self.schema.encode({"input_ids": ids, **extra}))
            self.lengths[key][len(ids)] += 1
            return
        buffer = self.packers.setdefault(key, [[], [], []])  # ids, segments, positions
        rest = list(ids)
        while rest:
            space = self.pack - len(buffer[0])
            take, rest = rest[:space], rest[space:]
            segment = (buffer[1][-1] if buffer[1] else 0) + 1
            buffer[0] += take
            buffer[1] += [segment] * len(take)
            buffer[2] += range(len(take))
            if len(buffer[0]) == self.pack:
                self._emit_packed(key, buffer)

    def _emit_packed(self, key: str, buffer: list[list[int]]) -> None:
        self.lengths[key][len(buffer[0])] += 1  # real ids; the rest is padding
        pad = self.pack - len(buffer[0]) if self.pack else 0
        self.write(
            key,
            self.schema.encode(
                {
                    "input_ids": buffer[0] + [self.pad_id] * pad,
                    "segment_ids": buffer[1] + [0] * pad,
                    "positions": buffer[2] + [0] * pad,
                }
            ),
        )
        buffer[0], buffer[1], buffer[2] = [], [], []

    def close(self) -> dict[str, Any]:
        self._flush_counts()
        for key, buffer in self.packers.items():
            if buffer[0]:
                self._emit_packed(key, buffer)
        if self.files is not None:  # the files stay open for the next chunk
            self.files.flush()
        else:
            for handle in self.handles.values():
                handle.close()
        return {
            k: {
                **v,
                "lengths": dict(sorted(self.lengths[k].items())),
                "documents": self.documents[k],
                "doc_tokens": self.doc_tokens[k],
                "unknown": self.unknown[k],
            }
            for k, v in self.pieces.items()
        }


@dataclass(frozen=True)
class Windows:
    """Examples of one document at a time, for --stride (its windows) and --pack (its ids into
    the packer): special tokens around each, truncation, the document's statistics."""

    before: list[int]
    after: list[int]
    max_length: int | None
    stride: int | None
    unk_id: int | None

    def emit(self, writer: ChunkWriter, doc_id: str, key: str, label: int | None, ids: Any) -> int:
        """One document's examples into writer (its shard's piece: key); its ids as tokenized."""
        import numpy as np

        content = np.asarray(ids, dtype=np.int64)
        full = len(self.before) + len(content) + len(self.after)
        unknown = int((content == self.unk_id).sum()) if self.unk_id is not None else 0
        writer.count_document(key, full, unknown)
        extra: dict[str, Any] = {"doc_id": doc_id}
        if label is not None:
            extra["label"] = label
        budget = (self.max_length or 0) - len(self.before) - len(self.after)
        if self.max_length is None:
            windows = [content]
        elif self.stride is None:
            windows = [content[:budget]]
        else:
            step = budget - self.stride
            starts = range(0, max(1, len(content) - self.stride), step)
            windows = [content[s : s + budget] for s in starts]
        for number, window in enumerate(windows):
            ids_out = np.concatenate([self.before, window, self.after]).astype(np.int64)
            if self.stride is not None:
                extra["window"] = number
            if writer.pack is None:
                extra["length"] = len(ids_out)
            writer.add(key, ids_out, dict(extra))
        return full


class PieceShardBody:
    """A text shard's records: its pieces, concatenated in chunk order (a `ShardBody`); or
    where the run appended them to its shards' files, that file (`prepared`).

    Attributes:
        work: the run's work folder, holding each chunk's piece folder.
        infos: each chunk's marker (its folder, and per piece: records, bytes, lengths).
        blocks: records hold blocks of documents: the shard's examples are its documents.
        files: the shards' files a local run appended to, closed (None: piece folders).
    """

    def __init__(
        self,
        work: str,
        infos: list[dict[str, Any]],
        blocks: bool = False,
        files: ShardFiles | None = None,
    ) -> None:
        self.work, self.infos, self.blocks, self.files = work, infos, blocks, files

    def __call__(self, task: ShardTask, out: Writable, progress: Progress | None) -> ShardResult:
        key = piece_key(task.split, task.index)
        if self.files is not None:  # its file whole, copied where not `prepared` (an indexed
            paths = [self.files.path(key)]  # shard's index is made as it is written)
        else:
            pieces = (info for info in self.infos if info.get("pieces", {}).get(key))
            paths = [storage.join(self.work, info["folder"], f"{key}.rec") for info in pieces]
        for path in paths:
            with storage.open_file(path, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
        return self._result(task)

    def prepared(self, task: ShardTask) -> tuple[str, ShardResult] | None:
        """The file holding the shard whole, and its result; None if it is to be written."""
        key = piece_key(task.split, task.index)
        if self.files is None or task.indexed or key not in self.files.sizes:
            return None
        return self.files.path(key), self._result(task)

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
    """A shard's key among a chunk's pieces and the shards' files: "train-00003"."""
    return f"{split}-{index:05d}"


def merge_lengths(pieces: list[dict[str, Any]]) -> Counter[int]:
    """Pieces' exact length counts, summed: a plain dict's loop (a Counter's update, and
    str keys made int for every piece, took 3.1 ms against its 0.95 for twelve pieces of
    ~1,500 lengths, real-like documents' at a conversion's end: RESULTS.md, "Issue 29,
    tenth session"). Keys are str in a marker read back (JSON)."""
    total: dict[int, int] = {}
    get = total.get
    for piece in pieces:
        lengths = piece["lengths"]
        if lengths and isinstance(next(iter(lengths)), str):
            lengths = {int(k): n for k, n in lengths.items()}
        for length, n in lengths.items():
            total[length] = get(length, 0) + n
    return Counter(total)


def length_summary(text: TextStatistics) -> dict[str, Any]:
    """The manifest's statistics of the stored examples (`Summary.to_json`): their lengths,
    from every chunk's exact counts at once. Summed shard by shard at the end, the same
    numbers took ~0.7 ms a shard, holding the GIL while both cores waited (benchmarks/
    RESULTS.md, "Issue 29, twelfth session")."""
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
