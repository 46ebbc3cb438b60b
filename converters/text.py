"""Text corpora to pre-tokenized shards: token ids stored once, so training never tokenizes.

Documents are read in input order, in chunks of files. Each chunk is tokenized in batches (the
fast WordPiece path on worker threads, or HF `tokenizers` with its own threads) and its examples
are appended to one piece file per output shard, chosen by a seeded hash of the document id.
A finished chunk is renamed into place; the shards are then the concatenation of their pieces in
chunk order. So the bytes depend only on the inputs and options, and a killed run redoes only the
unfinished chunk.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from feedgpu import format as fmt
from feedgpu import storage
from feedgpu.conversion import ConversionReport, DatasetPlan, RunOutput, write_dataset
from feedgpu.converters.listing import (
    SPLIT_FOLDERS,
    SourceFile,
    check_strict,
    fingerprint_files,
    hash_split,
    parse_split_fractions,
    sort_labels,
    split_folders,
)
from feedgpu.converters.text_sources import Document, ReadOptions, iter_documents, list_text_files
from feedgpu.converters.tokenizer import TextTokenizer, TokenizerSpec, load_tokenizer
from feedgpu.errors import UsageError
from feedgpu.records import encode_example, varint_runs
from feedgpu.shards import (
    MIN_SHARD_BYTES,
    MIN_SHARDS,
    WORK_DIR,
    Progress,
    ShardResult,
    ShardTask,
    Skip,
    Summary,
    default_workers,
    sidecar_path,
)

logger = logging.getLogger(__name__)
WASTE_LENGTHS = (64, 128, 256, 512, 1024)
BATCH_DOCS = 512
PARITY_SAMPLE_CHARS = 200_000  # ~50k tokens: a fraction of a second on both paths


@dataclass(frozen=True)
class TextOptions:
    """Options that change the bytes written; all of them go into the manifest.

    Attributes:
        tokenizer: tokenizer.json, vocab.txt, or train:wordpiece|bpe:SIZE.
        lowercase: for vocab.txt and trained WordPiece vocabularies.
        doc_per_line: each line of a .txt file is a document.
        text_field: JSON key of the text in .jsonl files.
        label_field: JSON key of the label in .jsonl files.
        folder_labels: label .txt documents by their class folder (SRC/[SPLIT/]CLASS/x.txt).
        encoding_errors: "skip" or "replace" for bytes that are not UTF-8.
        max_length: truncate each example to this many ids (special tokens included).
        stride: with max_length, split long documents into windows overlapping by this much.
        pack: concatenate documents into sequences of exactly this many ids.
        special: add the tokenizer's special tokens (CLS/SEP, BOS/EOS).
        split: hash split of documents when the source has no split folders.
        seed: seeds the assignment of documents to shards.
        shard_size_mb: target shard size.
        num_shards: shards per split, overriding shard_size_mb.
        chunk_mb: input read per resumable unit.
        name: dataset name (TFDS-safe).
    """

    tokenizer: str
    lowercase: bool = True
    doc_per_line: bool = False
    text_field: str = "text"
    label_field: str | None = None
    folder_labels: bool = False
    encoding_errors: str = "skip"
    max_length: int | None = None
    stride: int | None = None
    pack: int | None = None
    special: bool = True
    split: str | None = None
    seed: int = 0
    shard_size_mb: float = 128
    num_shards: int | None = None
    chunk_mb: float = 32
    name: str | None = None

    def __post_init__(self) -> None:
        if self.encoding_errors not in ("skip", "replace"):
            raise UsageError(f"--encoding-errors {self.encoding_errors!r}: choose skip or replace")
        if self.max_length is not None and self.max_length < 4:
            raise UsageError(f"--max-length {self.max_length}: must be at least 4")
        if self.stride is not None:
            if self.max_length is None:
                raise UsageError("--stride needs --max-length (the window size)")
            if not 0 <= self.stride < self.max_length // 2:
                raise UsageError(f"--stride {self.stride}: must be below half of --max-length")
        if self.pack is not None:
            if self.pack < 8:
                raise UsageError(f"--pack {self.pack}: must be at least 8")
            if self.max_length is not None:
                raise UsageError("--pack and --max-length exclude each other")
        if self.shard_size_mb <= 0 or self.chunk_mb <= 0:
            raise UsageError("--shard-size-mb and --chunk-mb must be positive")
        if self.num_shards is not None and self.num_shards < 1:
            raise UsageError(f"--num-shards {self.num_shards}: must be at least 1")

    @property
    def read(self) -> ReadOptions:
        """How files become documents."""
        return ReadOptions(
            self.doc_per_line, self.text_field, self.label_field, self.encoding_errors
        )


@dataclass(frozen=True)
class TextSource:
    """A planned input file: where its documents go."""

    file: SourceFile
    split: str | None  # None: each document is hash-split
    label: str | None  # the class folder, when labelled by folder


@dataclass
class ChunkWriter:
    """Piece files of one chunk, one per (split, shard), with their statistics."""

    folder: str
    pack: int | None
    pad_id: int
    handles: dict[str, Any] = field(default_factory=dict)
    pieces: dict[str, dict[str, Any]] = field(default_factory=dict)
    lengths: dict[str, Counter[int]] = field(default_factory=dict)
    unknown: Counter[str] = field(default_factory=Counter)
    packers: dict[str, list[list[int]]] = field(default_factory=dict)

    def write(self, key: str, record: bytes) -> None:
        from feedgpu.records import write_record

        if key not in self.handles:
            self.handles[key] = open(os.path.join(self.folder, f"{key}.rec"), "wb")  # noqa: SIM115
            self.pieces[key] = {"records": 0, "bytes": 0}
        self.pieces[key]["bytes"] += write_record(self.handles[key], record)
        self.pieces[key]["records"] += 1

    def count(self, key: str, length: int, unknown: int) -> None:
        """One document's statistics: exact length counts (cheap, and they merge exactly)."""
        self.lengths.setdefault(key, Counter())[length] += 1
        self.unknown[key] += unknown

    def add(self, key: str, ids: Any, extra: dict[str, Any]) -> None:
        """One example's ids (with special tokens): written, or into the packer."""
        if self.pack is None:
            self.write(key, encode_example({"input_ids": ids, **extra}))
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
        pad = self.pack - len(buffer[0]) if self.pack else 0
        self.write(
            key,
            encode_example(
                {
                    "input_ids": buffer[0] + [self.pad_id] * pad,
                    "segment_ids": buffer[1] + [0] * pad,
                    "positions": buffer[2] + [0] * pad,
                }
            ),
        )
        buffer[0], buffer[1], buffer[2] = [], [], []

    def close(self) -> dict[str, Any]:
        for key, buffer in self.packers.items():
            if buffer[0]:
                self._emit_packed(key, buffer)
        for handle in self.handles.values():
            handle.close()
        return {
            k: {**v, "lengths": dict(sorted(self.lengths[k].items())), "unknown": self.unknown[k]}
            for k, v in self.pieces.items()
        }


class TextRunner:
    """Tokenizes chunks into piece files, then assembles the unfinished shards."""

    def __init__(
        self,
        plan: DatasetPlan,
        sources: list[TextSource],
        chunks: list[list[int]],
        shard_counts: dict[str, int],
        tokenizer: TextTokenizer,
        options: TextOptions,
        label_names: list[str],
        workers: int,
        strict: bool,
    ) -> None:
        self.plan, self.sources, self.chunks = plan, sources, chunks
        self.shard_counts, self.tok, self.options = shard_counts, tokenizer, options
        self.label_index = {name: i for i, name in enumerate(label_names)}
        self.workers, self.strict = workers, strict
        self.fractions = parse_split_fractions(options.split) if options.split else {"train": 1.0}
        before, after = tokenizer.special_ids() if options.special else ([], [])
        self.before, self.after = before, after
        self.work = storage.join(plan.out_dir, WORK_DIR)
        self.use_fast = False
        self.parity: dict[str, Any] = {}

    # -- routing ---------------------------------------------------------------------------
    def _shard_key(self, split: str, doc_id: str) -> str:
        digest = hashlib.sha256(f"{self.options.seed}\0{doc_id}".encode()).digest()
        shard = int.from_bytes(digest[:8], "big") % self.shard_counts[split]
        return f"{split}-{shard:05d}"

    def _documents(self, chunk: list[int]) -> Iterator[tuple[Document | Skip, TextSource]]:
        for i in chunk:
            source = self.sources[i]
            for doc in iter_documents(source.file, self.options.read):
                yield doc, source

    # -- tokenizing ------------------------------------------------------------------------
    def _tokenize_fast(self, texts: list[str]) -> list[Any]:
        import tensorflow as tf

        ragged = self.tok.fast().tokenize(tf.constant(texts))  # [batch, (tokens)]
        values, splits = ragged.flat_values.numpy(), ragged.row_splits.numpy()
        return [values[splits[i] : splits[i + 1]] for i in range(len(texts))]

    def _tokenize(self, texts: list[str]) -> list[Any]:
        if not self.use_fast:
            return self.tok.encode_reference(texts)
        ids = self._tokenize_fast(texts)
        redo = [i for i, t in enumerate(texts) if self.tok.needs_reference(t)]
        if redo:
            for i, exact in zip(
                redo, self.tok.encode_reference([texts[i] for i in redo]), strict=True
            ):
                ids[i] = exact
        return ids

    def check_parity(self) -> None:
        """Fast path vs HF on the first documents; any difference and HF is used throughout."""
        if not self.tok.fast_capable:
            self.parity = {"path": "hf", "reason": "not a BERT WordPiece tokenizer"}
            return
        sample: list[str] = []
        chars = 0
        for doc, _ in (d for chunk in self.chunks for d in self._documents(chunk)):
            if isinstance(doc, Document) and not self.tok.needs_reference(doc.text):
                sample.append(doc.text)
                chars += len(doc.text)
                if chars >= PARITY_SAMPLE_CHARS:
                    break
        fast = self._tokenize_fast(sample) if sample else []
        reference = self.tok.encode_reference(sample) if sample else []
        mismatches = sum(1 for f, r in zip(fast, reference, strict=True) if list(f) != r)
        self.use_fast = mismatches == 0
        self.parity = {
            "path": "fast_wordpiece" if self.use_fast else "hf",
            "sample_documents": len(sample),
            "mismatched_documents": mismatches,
            "mismatch_rate": round(mismatches / len(sample), 6) if sample else 0.0,
        }
        if not self.use_fast:
            logger.warning(
                "fast WordPiece differs from HF on %d of %d sample documents; "
                "using HF tokenizers (slower, exact)",
                mismatches,
                len(sample),
            )

    # -- examples --------------------------------------------------------------------------
    def _emit(
        self, writer: ChunkWriter, doc: Document, split: str, label: int | None, ids: Any
    ) -> int:
        import numpy as np

        key = self._shard_key(split, doc.doc_id)
        content = np.asarray(ids, dtype=np.int64)
        full = len(self.before) + len(content) + len(self.after)
        unknown = int((content == self.tok.unk_id).sum()) if self.tok.unk_id is not None else 0
        writer.count(key, full, unknown)
        extra: dict[str, Any] = {"doc_id": doc.doc_id}
        if label is not None:
            extra["label"] = label
        budget = (self.options.max_length or 0) - len(self.before) - len(self.after)
        if self.options.max_length is None:
            windows = [content]
        elif self.options.stride is None:
            windows = [content[:budget]]
        else:
            step = budget - self.options.stride
            starts = range(0, max(1, len(content) - self.options.stride), step)
            windows = [content[s : s + budget] for s in starts]
        for number, window in enumerate(windows):
            ids_out = np.concatenate([self.before, window, self.after]).astype(np.int64)
            if self.options.stride is not None:
                extra["window"] = number
            if self.options.pack is None:
                extra["length"] = len(ids_out)
            writer.add(key, ids_out, dict(extra))
        return full

    def _emit_batch(self, writer: ChunkWriter, items: list[Any], ids_list: list[Any]) -> int:
        """A batch of documents as one example each: ids varint-encoded in one numpy pass.

        Windows and packing take the per-document path (`_emit`).
        """
        import numpy as np

        if self.options.stride is not None or self.options.pack is not None:
            return sum(
                self._emit(writer, doc, split, label, ids)
                for (doc, split, label), ids in zip(items, ids_list, strict=True)
            )
        before = np.asarray(self.before, dtype=np.int64)
        after = np.asarray(self.after, dtype=np.int64)
        budget = None
        if self.options.max_length is not None:
            budget = self.options.max_length - len(before) - len(after)
        parts, lengths, keys, tokens = [], [], [], 0
        for (doc, split, _), ids in zip(items, ids_list, strict=True):
            content = np.asarray(ids, dtype=np.int64)
            full = len(before) + len(content) + len(after)
            unknown = int((content == self.tok.unk_id).sum()) if self.tok.unk_id is not None else 0
            keys.append(self._shard_key(split, doc.doc_id))
            writer.count(keys[-1], full, unknown)
            tokens += full
            kept = content if budget is None else content[:budget]
            parts += [before, kept, after]
            lengths.append(len(before) + len(kept) + len(after))
        runs = varint_runs(np.concatenate(parts) if parts else np.zeros(0, np.int64), lengths)
        for (doc, _, label), packed, length, key in zip(items, runs, lengths, keys, strict=True):
            features: dict[str, Any] = {"doc_id": doc.doc_id, "input_ids": packed, "length": length}
            if label is not None:
                features["label"] = label
            writer.write(key, encode_example(features))
        return tokens

    def run_chunk(self, index: int, on_progress: Progress) -> None:
        """Tokenize one chunk into its piece folder, atomically."""
        final = storage.join(self.work, f"chunk-{index:05d}")
        tmp = f"{final}.tmp-{os.getpid()}"
        storage.remove(tmp)
        os.makedirs(tmp)
        writer = ChunkWriter(
            tmp,
            self.options.pack,
            self.tok.hf.token_to_id("[PAD]") or self.tok.hf.token_to_id("<pad>") or 0,
        )
        skips: list[Skip] = []
        tokens = 0
        batch: list[tuple[Document, str, int | None]] = []

        def emit_ready(pending: list[Any], limit: int) -> int:
            """Emit finished batches in order; wait only when more than limit are in flight."""
            emitted = 0
            while pending and (pending[0][1].done() or len(pending) > limit):
                items, future = pending.pop(0)
                tokens = self._emit_batch(writer, items, future.result())
                on_progress(len(items), tokens)
                emitted += tokens
            return emitted

        # Tokenizing runs on worker threads (TF and HF release the GIL) while this thread reads.
        with ThreadPoolExecutor(max(1, self.workers if self.use_fast else 1)) as pool:
            pending: list[Any] = []
            for doc, source in self._documents(self.chunks[index]):
                if isinstance(doc, Skip):
                    check_strict([doc], self.strict)
                    skips.append(doc)
                    continue
                split = source.split or hash_split(doc.doc_id, self.fractions)
                label_name = doc.label if doc.label is not None else source.label
                if self.label_index and label_name is None:  # a labelled dataset: all or none
                    skip = Skip(doc.doc_id, "no label", "labelled dataset, document has none")
                    check_strict([skip], self.strict)
                    skips.append(skip)
                    continue
                label = self.label_index[label_name] if label_name is not None else None
                batch.append((doc, split, label))
                if len(batch) >= BATCH_DOCS:
                    items, batch = batch, []
                    pending.append(
                        (items, pool.submit(self._tokenize, [d.text for d, _, _ in items]))
                    )
                    tokens += emit_ready(pending, 4 * self.workers)
            if batch:
                pending.append((batch, pool.submit(self._tokenize, [d.text for d, _, _ in batch])))
            tokens += emit_ready(pending, 0)
        pieces = writer.close()
        info = {
            "tokenizer": self.tok.identity,
            "pieces": pieces,
            "tokens": tokens,
            "skips": [asdict(s) for s in skips],
        }
        with open(os.path.join(tmp, "chunk.json"), "w") as f:
            f.write(json.dumps(info))
        storage.remove(final)
        os.replace(tmp, final)

    def _chunk_info(self, index: int) -> dict[str, Any] | None:
        path = os.path.join(self.work, f"chunk-{index:05d}", "chunk.json")
        try:
            with open(path) as f:
                info: dict[str, Any] = json.load(f)
        except (OSError, ValueError):
            return None
        return info if info.get("tokenizer") == self.tok.identity else None

    def __call__(self, todo: Sequence[ShardTask], on_progress: Progress) -> RunOutput:
        self.check_parity()
        for index in range(len(self.chunks)):
            if self._chunk_info(index) is None:
                self.run_chunk(index, on_progress)
            else:  # finished by an earlier run
                info = self._chunk_info(index) or {}
                lengths = _merge_lengths(list(info.get("pieces", {}).values()))
                on_progress(sum(lengths.values()), int(info.get("tokens", 0)))
        infos = [self._chunk_info(i) or {} for i in range(len(self.chunks))]
        results = [self._assemble(task, infos) for task in todo]
        skips = [Skip(**s) for info in infos for s in info.get("skips", [])]
        pieces = [p for info in infos for p in info.get("pieces", {}).values()]
        self.tok.save(self.plan.out_dir)  # before the manifest, which names these files
        extra = {
            "tokenizer": {**self.plan.extra["tokenizer"], **self.parity},
            "text": text_statistics(pieces),
        }
        return RunOutput(results, skips, extra)

    def _assemble(self, task: ShardTask, infos: list[dict[str, Any]]) -> ShardResult:
        """A shard is its pieces, concatenated in chunk order."""
        key = f"{task.split}-{task.index:05d}"
        final = storage.join(self.plan.out_dir, task.filename)
        tmp = f"{final}.tmp-{os.getpid()}"
        result = ShardResult(task.filename, task.split, task.index, 0, 0)
        pieces = []
        with storage.open_file(tmp, "wb") as out:
            for index, info in enumerate(infos):
                piece = info.get("pieces", {}).get(key)
                if not piece:
                    continue
                with open(os.path.join(self.work, f"chunk-{index:05d}", f"{key}.rec"), "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
                result.num_records += piece["records"]
                result.num_bytes += piece["bytes"]
                pieces.append(piece)
        lengths = _merge_lengths(pieces)
        summary = Summary()
        summary.add_counts("doc_length", lengths)
        result.stats = summary.to_json()
        storage.write_atomic(
            sidecar_path(self.plan.out_dir, task.filename), json.dumps(result.to_json()).encode()
        )
        storage.replace(tmp, final)
        return result


def _sources(files: list[SourceFile], options: TextOptions) -> list[TextSource]:
    folders = split_folders(files)
    if folders and options.split:
        raise UsageError("the source already has train/validation/test folders; drop --split")
    sources = []
    for f in files:
        split, below = None, f.rel
        if folders:
            top, _, below = f.rel.partition("/")
            split = SPLIT_FOLDERS[top]
        label = below.split("/", 1)[0] if options.folder_labels and "/" in below else None
        sources.append(TextSource(f, split, label))
    return sources


def _input_bytes(f: SourceFile) -> int:
    return f.size * 3 if f.rel.lower().endswith(".gz") else f.size  # ~3:1 for text under gzip


def plan_text_dataset(
    src: str, out_dir: str, options: TextOptions, *, workers: int = 1, strict: bool = False
) -> tuple[DatasetPlan, TextRunner]:
    """List the corpus, load or train the tokenizer, and plan chunks and shards.

    Raises:
        UsageError: no text files, bad options, or an unusable tokenizer.
        InputError: with strict, the first bad input found while listing.
    """
    files, skips = list_text_files(src)
    check_strict(skips, strict)
    if not files:
        raise UsageError(f"no .txt or .jsonl files found in {src} ({len(skips)} other files)")
    sources = _sources(files, options)
    if options.folder_labels:
        unlabelled = [s for s in sources if s.label is None]
        skips += [Skip(s.file.rel, "no label", "not inside a class folder") for s in unlabelled]
        sources = [s for s in sources if s.label is not None]
    read = options.read
    fractions = parse_split_fractions(options.split) if options.split else {"train": 1.0}
    label_names: list[str] = sort_labels(s.label for s in sources if s.label is not None)
    if options.label_field:  # a pre-pass: label names must be known before the first example
        seen = {
            d.label
            for s in sources
            for d in iter_documents(s.file, read)
            if isinstance(d, Document) and d.label is not None
        }
        label_names = sort_labels(seen)

    def training_texts() -> Iterator[str]:
        for s in sources:
            for d in iter_documents(s.file, read):
                if (
                    isinstance(d, Document)
                    and (s.split or hash_split(d.doc_id, fractions)) == "train"
                ):
                    yield d.text

    spec = TokenizerSpec.parse(options.tokenizer, options.lowercase)
    tokenizer = load_tokenizer(spec, training_texts() if spec.kind == "train" else ())
    name = fmt.sanitize_name(options.name or os.path.basename(os.path.abspath(src.split("*")[0])))

    # Chunks: consecutive files, about chunk_mb of input each: the unit of resumption.
    chunks: list[list[int]] = [[]]
    size = 0
    for i, s in enumerate(sources):
        if chunks[-1] and size + _input_bytes(s.file) > options.chunk_mb * (1 << 20):
            chunks.append([])
            size = 0
        chunks[-1].append(i)
        size += _input_bytes(s.file)
    # Shards per split from the expected output: ~4 bytes of text per token, ~2 bytes per id.
    total = sum(_input_bytes(s.file) for s in sources)
    split_bytes: dict[str, float] = {}
    if any(s.split for s in sources):
        for s in sources:
            split_bytes[s.split or "train"] = (
                split_bytes.get(s.split or "train", 0) + _input_bytes(s.file) / 2
            )
    else:
        split_bytes = {k: total * v / 2 for k, v in fractions.items() if v > 0}
    shard_counts = {}
    for split, est in split_bytes.items():
        by_size = math.ceil(est / (options.shard_size_mb * (1 << 20)))
        shard_counts[split] = options.num_shards or max(
            1, by_size, min(MIN_SHARDS, math.ceil(est / MIN_SHARD_BYTES))
        )
    tasks = [
        ShardTask(split, i, n, fmt.shard_filename(name, split, i, n), ())
        for split, n in sorted(shard_counts.items(), key=lambda kv: fmt.split_order(kv[0]))
        for i in range(n)
    ]
    labelled = bool(label_names)
    if options.pack:
        features = [
            fmt.Feature(k, "int64", (-1,)) for k in ("input_ids", "segment_ids", "positions")
        ]
    else:
        features = [
            fmt.Feature("input_ids", "int64", (-1,)),
            fmt.Feature("length", "int64"),
            fmt.Feature("doc_id", "string", kind="text"),
        ]
        if options.stride is not None:
            features.append(fmt.Feature("window", "int64"))
        if labelled:
            features.append(fmt.Feature("label", "int64", kind="class_label"))
    tokenizer_info = {
        "identity": tokenizer.identity,
        "spec": options.tokenizer,
        "model": tokenizer.config["model"]["type"],
        "vocab_size": tokenizer.vocab_size,
        "lowercase": tokenizer.lowercase,
        "files": ["tokenizer.json", *(["vocab.txt"] if tokenizer.is_wordpiece else [])],
        "special_ids": list(tokenizer.special_ids()) if options.special else [[], []],
    }
    plan = DatasetPlan(
        out_dir=out_dir,
        name=name,
        converter="text",
        source=src,
        options={**asdict(options), "name": name},
        inputs_fingerprint=fingerprint_files(files),
        features=features,
        label_names=label_names,
        supervised_keys=("input_ids", "label") if labelled and not options.pack else None,
        tasks=tasks,
        listing_skips=skips,
        extra={"tokenizer": tokenizer_info},
    )
    runner = TextRunner(
        plan, sources, chunks, shard_counts, tokenizer, options, label_names, workers, strict
    )
    return plan, runner


def _merge_lengths(pieces: list[dict[str, Any]]) -> Counter[int]:
    total: Counter[int] = Counter()
    for piece in pieces:
        total.update({int(k): n for k, n in piece["lengths"].items()})
    return total


def text_statistics(pieces: list[dict[str, Any]]) -> dict[str, Any]:
    """Documents, tokens, unknown rate, padding waste at fixed lengths, exact length counts.

    Lengths count every id of a document, special tokens included, before truncation; the
    exact histogram is what the pipeline chooses bucket boundaries from.
    """
    lengths = _merge_lengths(pieces)
    count = sum(lengths.values())
    tokens = sum(length * n for length, n in lengths.items())
    unknown = sum(p["unknown"] for p in pieces)
    waste = {}
    for fixed in WASTE_LENGTHS:
        kept = sum(min(length, fixed) * n for length, n in lengths.items())
        waste[str(fixed)] = round(1 - kept / (count * fixed), 4) if count else 0.0
    return {
        "documents": count,
        "tokens": tokens,
        "unknown_rate": round(unknown / tokens, 6) if tokens else 0.0,
        "padding_waste_fixed": waste,
        "length_counts": sorted([length, n] for length, n in lengths.items()),
    }


def convert_text(
    src: str,
    out_dir: str,
    options: TextOptions,
    *,
    workers: int | None = None,
    strict: bool = False,
    overwrite: bool = False,
    quiet: bool = False,
) -> ConversionReport:
    """Convert a text corpus into pre-tokenized TFRecord shards in out_dir (see module doc)."""
    workers = workers or default_workers()
    plan, runner = plan_text_dataset(src, out_dir, options, workers=workers, strict=strict)
    return write_dataset(
        plan,
        runner=runner,
        overwrite=overwrite,
        quiet=quiet,
        unit="doc",
        rate_unit="M tokens/s",
        count_known=False,
    )
