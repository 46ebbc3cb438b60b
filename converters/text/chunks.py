"""Tokenizing a text corpus in chunks: piece files per shard, resumable, then shards assembled.

Each chunk (consecutive input files) is read in order and tokenized in batches on worker
threads; each record (a document's example, or a block of consecutive documents: `blocks`)
goes to the piece file of the shard its (first) document's seeded hash picks.
A finished chunk is renamed into place, so a killed run redoes at most one; a shard is its
pieces concatenated in chunk order, so the bytes do not depend on thread counts.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from feedgpu import storage
from feedgpu.convert.commit import WORK_DIR, Progress
from feedgpu.convert.execute import ShardStage, StageOutput
from feedgpu.convert.plan import DatasetPlan, ShardTask, Skip
from feedgpu.convert.run_options import RunOptions
from feedgpu.converters.text.batches import Batch, Labels, iter_batches
from feedgpu.converters.text.chunk_batches import ChunkBatches, run_batches
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
from feedgpu.converters.text.shard_files import ShardFiles
from feedgpu.converters.text.tokenizer import TextTokenizer
from feedgpu.errors import InputError
from feedgpu.format.manifest import TokenizerInfo

if TYPE_CHECKING:
    from feedgpu.converters.text.options import TextOptions, TextSource

logger = logging.getLogger(__name__)
# A chunk marker of another format (an older feedgpu) is redone. 3: shards by SipHash; 4:
# records may hold blocks of documents, each block's shard picked by its first document; 5:
# batches (which blocks are cut within) are JSON lines by bytes, no longer texts by characters;
# 6: characters beyond ASCII by the compiled step's table of HF's answers (`char_table`); 7: a local
# run's chunks appended to the shards' files (`shard_files`), their markers without a folder;
# 8: the run's first and last chunks cut into smaller batches at their edges (`iter_batches`);
# 9: texts holding brackets no longer left to Python (same ids), tensorflow-text gone.
CHUNK_FORMAT = 9


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
        # Optimistic until the parity check says otherwise (`_run_chunk` redoes what it must).
        self.use_fast = tokenizer.road()[0] == "compiled"
        self.parity: dict[str, Any] = {}
        self._parity: Future[None] | None = None  # the parity check, while it runs
        self._parity_due = False  # a local run's, started once its first batch is written
        self._files: ShardFiles | None = None  # a local run's shards, appended to by chunks
        self._hf_lock = threading.Lock()  # HF batches on its own threads: one call at a time

    def __getstate__(self) -> dict[str, Any]:
        # Beam ships the runner after its parity check: no future, and a fresh lock there.
        return {**self.__dict__, "_parity": None, "_hf_lock": None, "_files": None}

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

    def _encode(self, batch: Batch, fast: bool, strict: bool) -> tuple[list[Skip], Any]:
        """A batch's skips (of lines it parses first), and its records (`RecordMaker`'s
        `Made`; with --pack, what `ChunkWriter.pack` takes), or None without documents.

        Runs on a worker thread: the compiled steps (or HF's) run without the GIL.
        """
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

    def run_chunk(self, index: int, on_progress: Progress, run: RunOptions) -> dict[str, Any]:
        """Tokenize one chunk (a Beam worker's): `_run_chunk` on threads of its own."""
        with ThreadPoolExecutor(self._threads(run)) as pool:
            return self._run_chunk(index, on_progress, run, pool)[0]

    def _threads(self, run: RunOptions) -> int:
        # One thread a core: with two a core, real-like text converted 4% slower, short 1.5%.
        return run.worker_count()

    def _reading(self, index: int, strict: bool) -> ChunkBatches:
        skips: list[Skip] = []
        files = [self.sources[i] for i in self.chunks[index]]
        batches = iter_batches(
            files,
            self.options.read,
            self.labels,
            skips,
            strict,
            index == 0,
            index == len(self.chunks) - 1,
        )
        return ChunkBatches(index, batches, skips)

    def _run_chunk(
        self,
        index: int,
        on_progress: Progress,
        run: RunOptions,
        pool: ThreadPoolExecutor,
        reading: ChunkBatches | None = None,
        ahead: Callable[[], ChunkBatches | None] | None = None,
    ) -> tuple[dict[str, Any], ChunkBatches | None]:
        """Tokenize one chunk on pool's threads (its reading begun, or not), appended to the
        shards' files (a local run: `shard_files`) or into a fresh folder of its own that its
        marker (written atomically, last) names: no folder is renamed (gs:// cannot), and two
        attempts (Beam's) never mix pieces. Its marker's info, and the next chunk's reading
        if ahead began it (`chunk_batches.run_batches`)."""
        folder = None
        if self._files is not None:  # cut back to the chunks kept
            self._files.begin()
        else:
            folder = f"chunk-{index:05d}.{os.getpid()}-{uuid.uuid4().hex[:8]}"
            storage.makedirs(storage.join(self.work, folder))
        tmp = storage.join(self.work, folder or "")  # ChunkWriter's folder: unused with files
        pack = self.options.pack
        packer = None if pack is None else Packer(pack, self.pad_id, len(self.names))
        writer = ChunkWriter(tmp, self.names, packer, self._files)
        reading = reading or self._reading(index, run.strict)
        reported = [0, 0]  # documents and tokens shown by the progress bar, for a redo

        def submit(batch: Batch) -> tuple[Future[Any], bool]:
            fast = self.use_fast  # read once: the parity verdict may land meanwhile
            return pool.submit(self._encode, batch, fast, run.strict), fast

        def emit(batch: Batch, encoded: Any) -> None:
            tokens = writer.pack(*encoded) if packer else writer.put(encoded)
            reported[0] += len(batch)
            reported[1] += tokens
            on_progress(len(batch), tokens)
            self._start_parity()

        following = run_batches(reading, submit, emit, 4 * run.worker_count(), ahead)
        pieces = writer.close()
        self._start_parity()
        if self._parity is not None:
            self._parity.result()
        if reading.fast_used and not self.use_fast:  # the parity check failed meanwhile
            on_progress(-reported[0], -reported[1])
            if following is not None:  # read ahead by the compiled road too
                following.drop()
            return self._run_chunk(index, on_progress, run, pool, None, ahead)  # with HF
        info = {
            "format": CHUNK_FORMAT,
            "tokenizer": self.tok.identity,
            "pieces": pieces,
            "tokens": reported[1],
            "skips": [asdict(s) for s in reading.skips],
            "folder": folder,
        }
        storage.write_atomic(self._marker(index), json.dumps(info).encode())
        if self._files is not None:
            self._files.kept(pieces)
        return info, following

    def _kept(self, index: int, on_progress: Progress) -> dict[str, Any] | None:
        """A chunk's marker info if an earlier run (or Beam's workers) finished it and its
        bytes are kept (its progress shown); else None: it is to be tokenized."""
        info = self._chunk_info(index)
        if info is not None and self._files is not None and not self._files.keep(info):
            return None  # the files lost its bytes (or a chunk before it was redone)
        if info is not None:
            documents = sum(p["documents"] for p in info.get("pieces", {}).values())
            on_progress(documents, int(info.get("tokens", 0)))
        return info

    def _run_local(self, run: RunOptions, on_progress: Progress) -> list[dict[str, Any]]:
        """Every chunk's marker info, those not kept tokenized in order on one pool of
        threads, each chunk's last batches beside the next one's first (unless that one has
        a marker: it may be kept, checked in its turn)."""
        infos: list[dict[str, Any]] = []
        reading: ChunkBatches | None = None  # the chunk's, read ahead
        with ThreadPoolExecutor(self._threads(run)) as pool:
            try:
                for index in range(len(self.chunks)):
                    info = self._kept(index, on_progress) if reading is None else None
                    if info is None:
                        after, ahead = index + 1, None
                        if after < len(self.chunks) and not storage.exists(self._marker(after)):
                            ahead = functools.partial(self._reading, after, run.strict)
                        info, reading = self._run_chunk(
                            index, on_progress, run, pool, reading, ahead
                        )
                    infos.append(info)
            except BaseException:  # the batches queued (some read ahead) are not begun
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        return infos

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
            self._parity_due = True  # beside the first chunk (`_start_parity`)
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
            infos = self._run_local(run, on_progress)
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
        text = text_statistics(pieces)
        summary = length_summary(text)
        return StageOutput(body, skips, text=text, statistics=summary, finish=self._finish)

    def _start_parity(self) -> None:
        """A local run's parity check started on a thread of its own, once, beside the
        chunks, which take the compiled road meanwhile (redone with HF if the verdict is against
        it). Not before the first batch is written: started with the run, its Python (and
        the tokenizer's identity) held the GIL while the first batches were read, and the
        second thread waited ~10 ms for its first (benchmarks/RESULTS.md, "Issue 29,
        eleventh session")."""
        if self._parity_due:
            self._parity_due = False
            starter = ThreadPoolExecutor(1, thread_name_prefix="feedgpu-parity")
            self._parity = starter.submit(self._check_and_save)
            starter.shutdown(wait=False)

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
        self._start_parity()  # every chunk kept from an earlier run: not started yet
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
