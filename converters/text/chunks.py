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
        chunks: list[list[TextSource]],
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

    def run_chunks(
        self,
        indices: Sequence[int],
        on_progress: Progress,
        run: RunOptions,
        pool: ThreadPoolExecutor,
    ) -> dict[int, dict[str, Any]]:
        """Tokenize chunks, in order, as one stream of batches on pool's threads (a chunk's
        last batches beside the next one's first), each into a fresh folder of its own, which
        its marker (written atomically once its last batch is) names: no folder is renamed
        (gs:// cannot), and two attempts (Beam's) never mix pieces. Each chunk's marker info."""
        read, strict = self.options.read, run.strict
        infos: dict[int, dict[str, Any]] = {}
        out: list[_ChunkOut] = []  # the chunk being written

        def items() -> Iterator[tuple[int, list[Skip], Batch | None]]:
            for index in indices:
                skips: list[Skip] = []  # reading's, then its batches' as they are written
                for batch in iter_batches(self.chunks[index], read, self.labels, skips, strict):
                    yield index, skips, batch
                yield index, skips, None  # its end

        def submit(item: tuple[int, list[Skip], Batch | None]) -> Future[Any]:
            if item[2] is None:
                done: Future[Any] = Future()
                done.set_result(None)
                return done
            return pool.submit(self._encode, item[2], strict)

        def emit(item: tuple[int, list[Skip], Batch | None], result: Any) -> None:
            index, skips, batch = item
            if not out or out[0].index != index:
                out[:] = [_ChunkOut(self, index)]
            if batch is None:
                infos[index] = out.pop().finish(skips)
                return
            found, encoded = result
            skips.extend(found)
            if encoded is not None:
                on_progress(len(batch), out[0].put(batch, encoded))

        run_batches(items(), submit, emit, 4 * run.worker_count())
        return infos

    def _kept(self, keys: set[str]) -> dict[int, dict[str, Any] | None]:
        """Each chunk's marker info if an earlier run (or Beam's workers) finished it, else
        None: it is to be tokenized. A shard still to write whose one piece is gone (renamed
        into a shard since lost: `prepared`) has its chunk tokenized again; only a shard of
        one piece is ever renamed, so only those are looked for."""
        kept = {i: self._chunk_info(i) for i in range(len(self.chunks))}
        holders: dict[str, list[int]] = {}
        for index, info in kept.items():
            for key in (info or {}).get("pieces", {}):
                holders.setdefault(key, []).append(index)
        for key in keys:
            (index, *more) = holders.get(key, [-1, -1])
            info = kept.get(index)
            if (
                not more
                and info
                and not storage.exists(storage.join(self.work, info["folder"], f"{key}.rec"))
            ):
                kept[index] = None
        return kept

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
        keys = {piece_key(t.split, t.index) for t in todo}
        kept = self._kept(keys)
        missing = [i for i, info in kept.items() if not info]
        if run.on_beam and missing:
            from feedgpu.convert.beam import run_on_beam

            work = _BeamChunk(self, run)
            run_on_beam(work, missing, run.beam_flags(), "tokenize chunks", quiet=run.quiet)
            kept.update((i, self._chunk_info(i)) for i in missing)  # the markers Beam wrote
        for info in kept.values():  # shown as done
            if info is not None:
                documents = sum(p["documents"] for p in info.get("pieces", {}).values())
                on_progress(documents, int(info.get("tokens", 0)))
        with ThreadPoolExecutor(run.worker_count()) as pool:  # one thread a core
            try:
                made = self.run_chunks([i for i in missing if not kept[i]], on_progress, run, pool)
            except BaseException:  # the batches queued are not begun
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        infos = [kept[i] or made[i] for i in range(len(self.chunks))]
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
            self.runner.run_chunks([index], lambda items, measured: None, self.run, pool)
        return index


class _ChunkOut:
    """One chunk as it is written: its piece folder, its writer and counts."""

    def __init__(self, runner: TextRunner, index: int) -> None:
        self.runner, self.index = runner, index
        self.folder = f"chunk-{index:05d}.{os.getpid()}-{uuid.uuid4().hex[:8]}"
        storage.makedirs(storage.join(runner.work, self.folder))
        pack = runner.options.pack
        self.packer = None if pack is None else Packer(pack, runner.pad_id, len(runner.names))
        self.writer = ChunkWriter(storage.join(runner.work, self.folder), runner.names, self.packer)
        self.tokens = self.replaced = 0

    def put(self, batch: Batch, encoded: Any) -> int:
        """A batch's records written; its tokens."""
        count: int = self.writer.pack(*encoded) if self.packer else self.writer.put(encoded)
        self.tokens += count
        self.replaced += batch.replaced
        return count

    def finish(self, skips: list[Skip]) -> dict[str, Any]:
        """The chunk's pieces closed and its marker written, last; the marker's info."""
        info = {
            "format": CHUNK_FORMAT,
            "tokenizer": self.runner.tok.identity,
            "pieces": self.writer.close(),
            "tokens": self.tokens,
            "replaced": self.replaced,
            "skips": [asdict(s) for s in skips],
            "folder": self.folder,
        }
        storage.write_atomic(self.runner._marker(self.index), json.dumps(info).encode())
        return info


def run_batches(
    items: Iterator[Any],
    submit: Callable[[Any], Future[Any]],
    emit: Callable[[Any, Any], None],
    limit: int,
) -> None:
    """Every item read, submitted (at most limit + 1 in flight) and emitted in order with its
    result.

    Raises:
        InputError: --strict: the first skip, in a batch or while reading (every item before
            it emitted); any other error reading, in its turn too.
    """
    pending: deque[tuple[Any, Future[Any]]] = deque()
    error: Exception | None = None
    while True:
        try:
            item = next(items, None)
        except Exception as e:  # raised once the items before it are emitted
            item, error = None, e
        if item is not None:
            pending.append((item, submit(item)))
        while pending and (item is None or len(pending) > limit or pending[0][1].done()):
            done, future = pending.popleft()
            emit(done, future.result())
        if item is None:
            break
    if error is not None:
        raise error
