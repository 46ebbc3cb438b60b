"""Tokenizing a text corpus in chunks: piece files per shard, resumable; a shard is its pieces.

Each chunk (consecutive input files) is read in order and tokenized in batches on worker
threads; each record (a document's example, or a block of consecutive documents: `blocks`)
goes to the piece file of the shard its (first) document's seeded hash picks. A finished
chunk's marker is written last, so a killed run redoes at most one; a shard is its pieces in
chunk order, so the bytes do not depend on thread counts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from feedgpu import storage
from feedgpu.convert.commit import WORK_DIR, Progress
from feedgpu.convert.execute import ShardStage, StageOutput
from feedgpu.convert.kept import counted
from feedgpu.convert.plan import DatasetPlan, ShardTask, Skip
from feedgpu.convert.run_options import RunOptions
from feedgpu.converters.text.batches import Batch, Labels, iter_batches
from feedgpu.converters.text.names import route_key
from feedgpu.converters.text.parity import compare_paths
from feedgpu.converters.text.pieces import (
    ChunkWriter,
    PieceShardBody,
    length_summary,
    piece_key,
    text_statistics,
)
from feedgpu.converters.text.plain_wordpiece import flat_ids
from feedgpu.converters.text.records import Packer, RecordMaker
from feedgpu.converters.text.tokenizer import TextTokenizer
from feedgpu.errors import InputError

if TYPE_CHECKING:
    from feedgpu.converters.text.options import TextOptions, TextSource

# A chunk marker of another format (an older feedgpu) is redone. 3: shards by SipHash; 4:
# records may hold blocks of documents, each block's shard picked by its first document; 5:
# batches (which blocks are cut within) are JSON lines by bytes, no longer texts by characters;
# 6: characters beyond ASCII by the compiled step's table of HF's answers (`char_table`);
# 7-9: markers of chunks appended to shard files, of batches cut smaller at the run's edges;
# 10: every chunk in a piece folder, its batches all of one size.
CHUNK_FORMAT = 10


class TextRunner(ShardStage):
    """Tokenizes chunks into piece folders, then gives the shards as their pieces."""

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
        self.records = RecordMaker(
            shard_counts,
            route_key(options.seed),
            before,
            after,
            options.max_length,
            options.stride,
            options.docs_per_record if options.blocks else 1,
            tokenizer.unk_id,
        )
        self.names = [piece_key(s, i) for s, n in shard_counts.items() for i in range(n)]
        self.work = storage.join(plan.out_dir, WORK_DIR)
        self.schema = plan.schema
        self.tokenizer_info = plan.tokenizer
        self.pad_id = plan.tokenizer.pad_id
        self.use_fast = False  # until the parity sample says (`check_parity`)
        self.parity: dict[str, Any] = {}
        self._hf_lock = threading.Lock()  # HF batches on its own threads: one call at a time

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_hf_lock": None}  # Beam ships the runner: a fresh lock there

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _hf_lock=threading.Lock())

    # -- tokenizing ------------------------------------------------------------------------
    def _tokenize(self, texts: list[str], fast: bool) -> tuple[Any, Any]:
        """Ids of texts without special tokens, concatenated (int64 numpy), and each text's
        count: by the tokenizer's road (`TextTokenizer.ids`), or HF's alone (not fast: the
        parity sample found the compiled step wrong), one HF call at a time (it runs its own
        threads)."""
        if not fast:
            with self._hf_lock:
                return flat_ids(self.tok.encode_reference(texts))
        return self.tok.ids(texts)

    def check_parity(self) -> None:
        """The compiled step vs HF on a sample spread over the corpus; any difference and HF
        tokenizes throughout."""
        self.parity = compare_paths(self.tok, self.sources, self.options.read, self.options.seed)
        self.use_fast = self.parity["road"] == "compiled"

    def _encode(self, batch: Batch, strict: bool) -> tuple[list[Skip], Any]:
        """A batch's skips (of lines it parses first), and its records (`RecordMaker`'s
        `Made`; with --pack, what `ChunkWriter.pack` takes), or None without documents.

        Runs on a worker thread: the compiled steps (or HF's) run without the GIL.
        """
        fast = self.use_fast
        line_ids = self.tok.line_ids(self.options.read.text_field) if fast else None
        skips = batch.parse(self.options.read, self.labels.fractions, strict, line_ids)
        if not len(batch):
            return skips, None
        tokenized = batch.tokenized(lambda texts: self._tokenize(texts, fast))
        if self.options.pack is not None:
            return skips, self.records.packed(tokenized)
        if self.options.stride is not None:
            return skips, self.records.windows(tokenized)
        return skips, self.records.documents(tokenized)

    def run_chunk(
        self, index: int, on_progress: Progress, run: RunOptions, pool: ThreadPoolExecutor
    ) -> dict[str, Any]:
        """Tokenize one chunk on pool's threads into a fresh folder of its own, which its
        marker (written atomically, last) names: no folder is renamed (gs:// cannot), and two
        attempts (Beam's) never mix pieces. Its marker's info."""
        folder = f"chunk-{index:05d}.{os.getpid()}-{uuid.uuid4().hex[:8]}"
        storage.makedirs(storage.join(self.work, folder))
        pack = self.options.pack
        packer = None if pack is None else Packer(pack, self.pad_id, len(self.names))
        writer = ChunkWriter(storage.join(self.work, folder), self.names, packer)
        files = [self.sources[i] for i in self.chunks[index]]
        skips: list[Skip] = []
        batches = iter_batches(files, self.options.read, self.labels, skips, run.strict)
        tokens = replaced = 0

        def emit(batch: Batch, encoded: Any) -> None:
            nonlocal tokens, replaced
            count = writer.pack(*encoded) if packer else writer.put(encoded)
            tokens += count
            replaced += batch.replaced
            on_progress(len(batch), count)

        def submit(batch: Batch) -> Future[Any]:
            return pool.submit(self._encode, batch, run.strict)

        run_batches(batches, skips, submit, emit, 4 * run.worker_count())
        info = {
            "format": CHUNK_FORMAT,
            "tokenizer": self.tok.identity,
            "pieces": writer.close(),
            "tokens": tokens,
            "replaced": replaced,
            "skips": [asdict(s) for s in skips],
            "folder": folder,
        }
        storage.write_atomic(self._marker(index), json.dumps(info).encode())
        return info

    def _kept(self, index: int, on_progress: Progress, keys: set[str]) -> dict[str, Any] | None:
        """A chunk's marker info if an earlier run (or Beam's workers) finished it and its
        pieces of the shards still to write (keys) are there (its progress shown); else None:
        it is to be tokenized."""
        info = self._chunk_info(index)
        if info is not None:
            folder = storage.join(self.work, info["folder"])
            wanted = (k for k in info.get("pieces", {}) if k in keys)
            if not all(storage.exists(storage.join(folder, f"{k}.rec")) for k in wanted):
                return None  # a piece renamed into a shard since lost (`prepared`)
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
        return info if same and info.get("folder") else None  # another tokenizer or version

    def run(self, run: RunOptions, on_progress: Progress, todo: Sequence[ShardTask]) -> StageOutput:
        """The parity verdict, then every chunk not finished by an earlier run tokenized (on
        Beam workers when `run` says so, else in order on one pool of threads); the shards
        are their pieces (`PieceShardBody`)."""
        self.check_parity()
        if run.on_beam:
            from feedgpu.convert.beam import run_on_beam

            missing = [i for i in range(len(self.chunks)) if self._chunk_info(i) is None]
            if missing:
                flags = run.beam_flags()
                work = _BeamChunk(self, run)
                run_on_beam(work, missing, flags, "tokenize chunks", quiet=run.quiet)
        infos, keys = [], {piece_key(t.split, t.index) for t in todo}
        with ThreadPoolExecutor(run.worker_count()) as pool:  # one thread a core
            try:
                for index in range(len(self.chunks)):
                    info = self._kept(index, on_progress, keys)
                    infos.append(info or self.run_chunk(index, on_progress, run, pool))
            except BaseException:  # the batches queued are not begun
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        skips = [Skip(**s) for info in infos for s in info.get("skips", [])]
        pieces = [p for info in infos for p in info.get("pieces", {}).values()]
        every = [*self.plan.listing_skips, *skips]  # files refused while listing too
        if not any(piece["records"] for piece in pieces) and not counted(every, "text"):
            # As image conversion refuses a folder without labelled images: an empty dataset
            # is never what was meant. (With skips, `check_kept` refuses it once skipped.jsonl
            # holds their reasons.)
            reasons = Counter(skip.reason for skip in every).most_common()
            why = ", ".join(f"{n} {reason}" for reason, n in reasons) or "no documents found"
            raise InputError(
                f"no document of {self.plan.source} could be converted ({why}); check "
                "--text-field/--label-field or the files' encoding, and see the reasons "
                "with --strict"
            )
        truncated = self.options.stride is None and self.options.pack is None
        self.tok.save(self.plan.out_dir, self.options.max_length if truncated else None)
        used = dataclasses.replace(
            self.tokenizer_info, identity=self.tok.identity, parity=self.parity
        )
        body = PieceShardBody(self.work, infos, self.schema.blocks)
        replaced = sum(int(info.get("replaced", 0)) for info in infos)
        text = dataclasses.replace(text_statistics(pieces), replaced_bytes=replaced)
        return StageOutput(body, skips, used, text, length_summary(text))


class _BeamChunk:
    """A picklable Beam function: tokenize one chunk into its piece folder."""

    def __init__(self, runner: TextRunner, run: RunOptions) -> None:
        self.runner, self.run = runner, run

    def __call__(self, index: int) -> int:
        with ThreadPoolExecutor(self.run.worker_count()) as pool:
            self.runner.run_chunk(index, lambda items, measured: None, self.run, pool)
        return index


def run_batches(
    batches: Iterator[Batch],
    skips: list[Skip],
    submit: Callable[[Batch], Future[Any]],
    emit: Callable[[Batch, Any], None],
    limit: int,
) -> None:
    """Every batch read, submitted (at most limit + 1 in flight) and emitted in order (a batch
    and its result; one whose lines were all skipped is not), its skips added to skips.

    Raises:
        InputError: --strict: the first skip, in a batch or while reading (every batch
            before it emitted); any other error reading, in its turn too.
    """
    pending: deque[tuple[Batch, Future[Any]]] = deque()
    error: Exception | None = None
    while True:
        try:
            batch = next(batches, None)
        except Exception as e:  # raised once the batches before it are emitted
            batch, error = None, e
        if batch is not None:
            pending.append((batch, submit(batch)))
        while pending and (batch is None or len(pending) > limit or pending[0][1].done()):
            done, future = pending.popleft()
            found, encoded = future.result()
            skips.extend(found)
            if len(done):
                emit(done, encoded)
        if batch is None:
            break
    if error is not None:
        raise error
