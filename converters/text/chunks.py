"""Tokenizing a text corpus in chunks: piece files per shard, resumable, then shards assembled.

Each chunk (consecutive input files) is read in order and tokenized in batches on worker
threads; each record (a document's example, or a block of consecutive documents: `blocks`)
goes to the piece file of the shard its (first) document's seeded hash picks.
A finished chunk is renamed into place, so a killed run redoes at most one; a shard is its
pieces concatenated in chunk order, so the bytes do not depend on thread counts.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from feedgpu import storage
from feedgpu.convert.commit import WORK_DIR, Progress
from feedgpu.convert.execute import ShardStage, StageOutput
from feedgpu.convert.plan import DatasetPlan, ShardTask, Skip
from feedgpu.convert.run_options import RunOptions
from feedgpu.converters.text.batches import Batch, Labels, iter_batches
from feedgpu.converters.text.examples import (
    BuiltExamples,
    ExampleBuilder,
    flat_ids,
    per_text_ids,
    route,
    route_key,
)
from feedgpu.converters.text.framed import FramedBatch, framed_batch, write_framed
from feedgpu.converters.text.parity import compare_paths
from feedgpu.converters.text.pieces import (
    ChunkWriter,
    PieceShardBody,
    Windows,
    piece_key,
    text_statistics,
)
from feedgpu.converters.text.shard_files import ShardFiles
from feedgpu.converters.text.sources import Document, input_bytes, iter_documents
from feedgpu.converters.text.tokenizer import TextTokenizer
from feedgpu.errors import InputError
from feedgpu.format.manifest import TokenizerInfo

if TYPE_CHECKING:
    from feedgpu.converters.text.options import TextOptions, TextSource

logger = logging.getLogger(__name__)
# A chunk marker of another format (an older feedgpu) is redone. 3: shards by SipHash; 4:
# records may hold blocks of documents, each block's shard picked by its first document; 5:
# batches (which blocks are cut within) are JSON lines by bytes, no longer texts by characters;
# 6: characters beyond ASCII by the compiled step's table of HF's answers (`char_table`), where
# tensorflow-text's path missed a few (characters newer than HF's Unicode tables); 7: a local
# run's chunks appended to the shards' files (`shard_files`), their markers without a folder.
CHUNK_FORMAT = 7


class TextRunner(ShardStage):
    """Tokenizes chunks into piece files, then assembles the unfinished shards."""

    def __init__(
        self,
        plan: DatasetPlan,
        sources: list[TextSource],
        chunks: list[list[int]],
        shard_counts: dict[str, int],
        tokenizer: TextTokenizer,
        options: TextOptions,
        fractions: dict[str, float],
    ) -> None:
        if plan.tokenizer is None:
            raise ValueError("a text plan records its tokenizer")
        self.plan, self.sources, self.chunks = plan, sources, chunks
        self.tok, self.options = tokenizer, options
        self.labels = Labels(fractions, {name: i for i, name in enumerate(plan.label_names)})
        before, after = (list(ids) for ids in plan.tokenizer.special_ids)
        self.windows = Windows(before, after, options.max_length, options.stride, tokenizer.unk_id)
        self.examples: ExampleBuilder | None = None  # one example per document: built in-graph
        if options.stride is None and options.pack is None:
            self.examples = ExampleBuilder(
                before,
                after,
                options.max_length,
                tokenizer.unk_id,
                bool(plan.label_names),
                options.docs_per_record if options.blocks else 1,
            )
        self.work = storage.join(plan.out_dir, WORK_DIR)
        self.schema = plan.schema  # the in-graph examples are checked against it too
        self.tokenizer_info = plan.tokenizer
        self.pad_id = plan.tokenizer.pad_id
        # Per document: a seeded hash of its id picks the shard (a piece key such as
        # "train-00003"), an index into `names`: each split's shards, in order.
        self._route_key = route_key(options.seed)
        self.names = [piece_key(s, i) for s, n in shard_counts.items() for i in range(n)]
        starts = itertools.accumulate(shard_counts.values(), initial=0)
        self._split_shards = {
            s: (a, n) for (s, n), a in zip(shard_counts.items(), starts, strict=False)
        }
        # Optimistic until the parity check says otherwise (`run_chunk` redoes what it must).
        self.use_fast = tokenizer.fast_capable
        self.parity: dict[str, Any] = {}
        self._parity: Future[None] | None = None  # the parity check, while it runs
        self._files: ShardFiles | None = None  # a local run's shards, appended to by chunks
        self._hf_lock = threading.Lock()  # HF batches on its own threads: one call at a time

    def __getstate__(self) -> dict[str, Any]:
        # Beam ships the runner after its parity check: no future, and a fresh lock there.
        return {**self.__dict__, "_parity": None, "_hf_lock": None, "_files": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _hf_lock=threading.Lock())

    # -- routing ---------------------------------------------------------------------------
    def _shards(self, doc_ids: Any, splits: list[str]) -> Any:
        """Each document's shard, as an index into `names` (int64 numpy)."""
        import numpy as np

        hashed = route(doc_ids, self._route_key)
        if len(self._split_shards) == 1:
            first, count = next(iter(self._split_shards.values()))
            return (hashed % np.uint64(count)).astype(np.int64) + first
        placed = np.array([self._split_shards[split] for split in splits], np.int64)
        return (hashed % placed[:, 1].astype(np.uint64)).astype(np.int64) + placed[:, 0]

    def _documents(self, chunk: list[int]) -> Iterator[tuple[Document | Skip, TextSource]]:
        for i in chunk:
            source = self.sources[i]
            for doc in iter_documents(source.file, self.options.read):
                yield doc, source

    # -- tokenizing ------------------------------------------------------------------------
    def _tokenize(
        self, texts: list[str], fast: bool, plain: list[bool] | None = None
    ) -> tuple[Any, Any]:
        """Ids of texts without special tokens, concatenated (int64 numpy); each text's count:
        HF's alone, or the fast path's with its doubtful texts redone (`TextTokenizer.ids`).

        plain: which texts are known to be plain (`Document.plain`), if known.
        """
        if not fast:
            with self._hf_lock:
                return flat_ids(self.tok.encode_reference(texts))
        return self.tok.ids(texts, plain)

    def check_parity(self) -> None:
        """Fast path vs HF on the first documents; any difference and HF is used throughout."""
        documents = (d for chunk in self.chunks for d, _ in self._documents(chunk))
        corpus_bytes = sum(input_bytes(source.file) for source in self.sources)
        self.parity = compare_paths(self.tok, documents, corpus_bytes)
        self.use_fast = self.parity["path"] == "fast_wordpiece"

    def _encode(self, batch: Batch, fast: bool, strict: bool) -> tuple[list[Skip], Any]:
        """A batch's skips (of lines it parses first), and its tokens and each document's
        shard; or, when each document makes exactly one example, its records (of a document
        or a block) and each record's shard (None without documents).

        Runs on a worker thread: the steps are graph calls (or HF's), mostly without the GIL.
        """
        line_ids = self.tok.line_ids(self.options.read.text_field) if fast else None
        skips = batch.parse(self.options.read, self.labels.fractions, strict, line_ids)
        return skips, self._encode_documents(batch, fast) if len(batch) else None

    def _encode_documents(self, batch: Batch, fast: bool) -> Any:
        values, lengths = batch.ids(lambda texts, plain: self._tokenize(texts, fast, plain))
        if self.examples is None:
            return self._shards(batch.names(), batch.splits), (values, lengths)
        framed = framed_batch(
            self.examples, batch, values, lengths, self._route_key, self._split_shards
        )
        if framed is not None:
            return framed
        names = batch.names()  # for routing and for the examples
        labels = None
        if self.examples.labelled:  # every document has one (iter_batches); the builder checks
            labels = [label for label in batch.labels if label is not None]
        built = self.examples(values, lengths, names, labels, batch.splits)
        order = built.blocks.order
        if order is None and len(built.blocks.sizes) == len(batch):  # a record per document
            return self._shards(names, batch.splits), built
        # A block goes where its first document's id sends it.
        firsts = built.blocks.firsts if order is None else order[built.blocks.firsts]
        firsts = firsts.tolist()
        splits = [batch.splits[i] for i in firsts]
        return self._shards([names[i] for i in firsts], splits), built

    # -- examples --------------------------------------------------------------------------
    def _emit_batch(self, writer: ChunkWriter, batch: Batch, encoded: Any) -> int:
        """A batch's examples into their shards' pieces, with its statistics."""
        import numpy as np

        if isinstance(encoded, FramedBatch):
            return write_framed(writer, self.names, encoded)
        shards, built = encoded
        if not isinstance(built, BuiltExamples):  # windows or packing: per document
            per_doc = per_text_ids(*built)
            keys = [self.names[i] for i in shards.tolist()]
            rows = zip(batch.names(), keys, batch.labels, per_doc, strict=True)
            return sum(self.windows.emit(writer, *row) for row in rows)
        if built.records:
            writer.check_first(built.records[0])
        full = built.full_lengths
        doc_shards = np.repeat(shards, built.blocks.sizes)  # each document's, in record order
        writer.count_batch(self.names, doc_shards, full, built.unknown, built.stored)
        writer.write_routed(self.names, shards, built.records)
        return int(full.sum())

    def run_chunk(self, index: int, on_progress: Progress, run: RunOptions) -> dict[str, Any]:
        """Tokenize one chunk, appended to the shards' files (a local run: `shard_files`)
        or into a fresh folder of its own that its marker (written atomically, last) names:
        no folder is renamed (gs:// cannot), and two attempts (Beam's) never mix pieces."""
        folder = None
        if self._files is not None:  # cut back to the chunks kept
            self._files.begin()
        else:
            folder = f"chunk-{index:05d}.{os.getpid()}-{uuid.uuid4().hex[:8]}"
            storage.makedirs(storage.join(self.work, folder))
        tmp = storage.join(self.work, folder or "")  # ChunkWriter's folder: unused with files
        writer = ChunkWriter(tmp, self.options.pack, self.pad_id, self.schema, self._files)
        skips: list[Skip] = []
        tokens = 0
        fast_used = False
        reported = [0, 0]  # documents and tokens shown by the progress bar, for a redo

        def progress(items: int, measured: int) -> None:
            reported[0] += items
            reported[1] += measured
            on_progress(items, measured)

        def emit_ready(pending: list[Any], limit: int) -> int:
            """Emit finished batches in order; wait only when more than limit are in flight."""
            emitted = 0
            while pending and (pending[0][1].done() or len(pending) > limit):
                items, future = pending.pop(0)
                found, encoded = future.result()
                skips.extend(found)
                if not len(items):  # every line skipped
                    continue
                tokens = self._emit_batch(writer, items, encoded)
                progress(len(items), tokens)
                emitted += tokens
            return emitted

        # Tokenizing runs on worker threads while this thread reads: one a core with the
        # compiled step (than two: real-like 4% faster, short 1.5%, Cyrillic the same;
        # RESULTS.md, "Issue 29, ninth session"), two without, to keep TensorFlow's graph
        # calls fed ("two threads a core").
        workers = run.worker_count()
        one_a_core = self.use_fast and self.tok.plain_step() is not None
        with ThreadPoolExecutor(workers * (1 if one_a_core else 2)) as pool:
            pending: list[Any] = []

            def submit(items: Batch) -> None:
                nonlocal fast_used
                fast = self.use_fast  # read once: the parity verdict may land meanwhile
                fast_used |= fast
                pending.append((items, pool.submit(self._encode, items, fast, run.strict)))

            files = [self.sources[i] for i in self.chunks[index]]
            batches = iter_batches(files, self.options.read, self.labels, skips, run.strict)
            try:
                for batch in batches:
                    submit(batch)
                    tokens += emit_ready(pending, 4 * workers)
            except InputError:  # --strict: a skip while reading; one in a batch read before
                for _, future in pending:  # it (parsed on a tokenizer thread) is the first
                    future.result()  # error: raised here, nothing written
                raise
            tokens += emit_ready(pending, 0)
        pieces = writer.close()
        if self._parity is not None:
            self._parity.result()
        if fast_used and not self.use_fast:  # the parity check failed after this chunk began
            on_progress(-reported[0], -reported[1])
            return self.run_chunk(index, on_progress, run)  # with HF; that folder is unused
        info = {
            "format": CHUNK_FORMAT,
            "tokenizer": self.tok.identity,
            "pieces": pieces,
            "tokens": tokens,
            "skips": [asdict(s) for s in skips],
            "folder": folder,
        }
        storage.write_atomic(self._marker(index), json.dumps(info).encode())
        if self._files is not None:
            self._files.kept(pieces)
        return info

    def _kept_or_run(self, index: int, on_progress: Progress, run: RunOptions) -> dict[str, Any]:
        """A chunk's marker info: an earlier run's (or Beam workers') if kept, else after
        tokenizing it now."""
        info = self._chunk_info(index)
        if info is not None and self._files is not None and not self._files.keep(info):
            info = None  # the files lost its bytes (or a chunk before it was redone)
        if info is None:
            return self.run_chunk(index, on_progress, run)
        documents = sum(p["documents"] for p in info.get("pieces", {}).values())
        on_progress(documents, int(info.get("tokens", 0)))
        return info

    def _marker(self, index: int) -> str:
        return storage.join(self.work, f"chunk-{index:05d}.json")

    def _chunk_info(self, index: int) -> dict[str, Any] | None:
        marker = self._marker(index)
        if not storage.exists(marker):
            return None
        try:
            info: dict[str, Any] = json.loads(storage.read_bytes(marker))
        except ValueError:
            return None
        same = info.get("tokenizer") == self.tok.identity and info.get("format") == CHUNK_FORMAT
        return info if same else None  # a chunk from another tokenizer or version: redone

    def run(self, run: RunOptions, on_progress: Progress, todo: Sequence[ShardTask]) -> StageOutput:
        """Tokenize every chunk not finished by an earlier run (on Beam workers when `run`
        says so), then yield how the shards are assembled from their pieces (locally, the
        shards of todo appended to as the chunks are tokenized: `shard_files`)."""
        if not run.on_beam and not storage.is_remote(self.work):
            self._files = ShardFiles(self.work, (piece_key(t.split, t.index) for t in todo))
        if not run.on_beam:
            # Beside the first chunk, which takes the fast path meanwhile (redone with HF if
            # the verdict is against it).
            starter = ThreadPoolExecutor(1, thread_name_prefix="feedgpu-parity")
            self._parity = starter.submit(self._check_and_save)
            starter.shutdown(wait=False)
        else:
            self.check_parity()  # before the runner is shipped to Beam's workers
            from feedgpu.convert.beam import run_on_beam

            # A chunk a local run appended is in its files, not a folder Beam's body reads.
            done = [self._chunk_info(i) for i in range(len(self.chunks))]
            missing = [i for i, info in enumerate(done) if not (info and info.get("folder"))]
            if missing:
                flags = run.beam_flags()
                work = _BeamChunk(self, run)
                run_on_beam(work, missing, flags, "tokenize chunks", quiet=run.quiet)
        try:
            infos = [self._kept_or_run(i, on_progress, run) for i in range(len(self.chunks))]
        except BaseException:
            if self._files is not None:  # a resumed run cuts them back to its chunks
                self._files.release(quiet=True)
            raise
        if self._files is not None:
            self._files.close()
        skips = [Skip(**s) for info in infos for s in info.get("skips", [])]
        pieces = [p for info in infos for p in info.get("pieces", {}).values()]
        if not any(piece["records"] for piece in pieces):
            # As image conversion refuses a folder without labelled images: an empty dataset
            # is never what was meant, and its cause is in the skip reasons.
            every = [*self.plan.listing_skips, *skips]  # files refused while listing too
            reasons = Counter(skip.reason for skip in every).most_common()
            why = ", ".join(f"{n} {reason}" for reason, n in reasons) or "no documents found"
            raise InputError(
                f"no document of {self.plan.source} could be converted ({why}); check "
                "--text-field/--label-field or the files' encoding, and see the reasons "
                "with --strict"
            )
        body = PieceShardBody(self.work, infos, self.schema.blocks, self._files)
        return StageOutput(body, skips, text=text_statistics(pieces), finish=self._finish)

    def _check_and_save(self) -> None:
        """The parity check, then the tokenizer saved beside the shards and its identity
        hashed (for the chunks' markers and the manifest): on the check's own thread while
        the chunks are tokenized, not after the shards (~2 ms of an end where one core waits)
        or while planning (~5 ms)."""
        self.check_parity()
        self.tok.save(self.plan.out_dir)
        logger.debug("tokenizer %s, saved in %s", self.tok.identity[:12], self.plan.out_dir)

    def _finish(self) -> TokenizerInfo:
        """After the shards: the parity verdict (its check ran beside them) and the saved
        tokenizer, before the manifest, which names these files."""
        if self._parity is not None:
            self._parity.result()  # also when every chunk was done before: its verdict is kept
        else:  # on Beam: checked before the chunks were shipped
            self.tok.save(self.plan.out_dir)
        info = self.tokenizer_info
        return dataclasses.replace(info, identity=self.tok.identity, parity=self.parity)


class _BeamChunk:
    """A picklable Beam function: tokenize one chunk into its piece folder."""

    def __init__(self, runner: TextRunner, run: RunOptions) -> None:
        self.runner, self.run = runner, run

    def __call__(self, index: int) -> int:
        self.runner.run_chunk(index, lambda items, measured: None, self.run)
        return index
