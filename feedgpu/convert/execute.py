"""Who writes a conversion's shards, chosen in one place from `RunOptions`: Apache Beam, the
local process pool (a converter of independent inputs, an `ItemShardBody`), or this process
(shards assembled from a stage's output, as text's are). Converters only describe the work:
a shard body, and for text a `ShardStage` that runs first and yields it."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from feedgpu import storage
from feedgpu.convert.commit import (
    Progress,
    ShardBody,
    ShardResult,
    adopt_shard,
    write_shard,
)
from feedgpu.convert.plan import ShardTask, Skip
from feedgpu.convert.pool import ItemShardBody, ShardPool
from feedgpu.convert.run_options import RunOptions
from feedgpu.format.manifest import TextStatistics, TokenizerInfo


@dataclass
class StageOutput:
    """What a stage produced before the shards are written.

    Attributes:
        body: writes one shard's records from what the stage made.
        skips: inputs the stage skipped outside any shard.
        tokenizer: the tokenizer as used (text: its parity verdict included).
        text: statistics of the stored text.
        statistics: the manifest's statistics (`Summary.to_json`) where the stage knows them
            whole (text: from every chunk's exact length counts), not the shards' merged.
        counted: the stage already reported every input's progress (shards then report none).
    """

    body: ShardBody
    skips: list[Skip] = field(default_factory=list)
    tokenizer: TokenizerInfo | None = None
    text: TextStatistics | None = None
    statistics: dict[str, Any] | None = None
    counted: bool = True


class ShardStage(abc.ABC):
    """Work a converter does before its shards can be written (text: tokenizing its chunks,
    resumably), on the executor `run` names; it yields the shards' body."""

    @abc.abstractmethod
    def run(self, run: RunOptions, on_progress: Progress, todo: Sequence[ShardTask]) -> StageOutput:
        """Do the work (or find it done by an earlier run) and say how shards are written;
        todo: the shards still to be written (an earlier run may have written the others)."""


@contextlib.contextmanager
def shard_writer(work: ShardBody | ShardStage, run: RunOptions) -> Iterator[ShardWriter]:
    """A writer for the shards of `work`, its workers started at once (a local pool's load
    their decoders while the caller lists and plans), stopped on exit."""
    pool = None
    if isinstance(work, ItemShardBody) and not run.on_beam:
        pool = ShardPool(work, workers=run.worker_count())
    try:
        yield ShardWriter(work, run, pool)
    finally:
        if pool is not None:
            pool.close()


class ShardWriter:
    """Runs a conversion's stage (if any) and writes its unfinished shards."""

    def __init__(
        self, work: ShardBody | ShardStage, run: RunOptions, pool: ShardPool | None
    ) -> None:
        self.work, self.run, self.pool = work, run, pool

    def __call__(
        self, out_dir: str, todo: Sequence[ShardTask], on_progress: Progress
    ) -> tuple[StageOutput, list[ShardResult]]:
        """The stage's output (or the body's), and the results of the shards of `todo`."""
        if isinstance(self.work, ShardStage):
            output = self.work.run(self.run, on_progress, todo)
        else:
            output = StageOutput(self.work, counted=False)
        quiet: Progress = lambda items, measured: None  # noqa: E731
        progress = quiet if output.counted else on_progress
        results = self._write(output.body, out_dir, todo, progress)
        return output, results

    def _write(
        self, body: ShardBody, out_dir: str, todo: Sequence[ShardTask], progress: Progress
    ) -> list[ShardResult]:
        if self.run.on_beam:
            from feedgpu.convert.beam import write_shards_on_beam

            flags = self.run.beam_flags()
            return write_shards_on_beam(body, out_dir, todo, flags, progress, quiet=self.run.quiet)
        if self.pool is not None:
            return self.pool.run(todo, out_dir, progress)

        # Shards written and flushed on threads, a few at once: written one by one and
        # flushed all at the end (finalize), a text conversion's shards waited for the disk
        # after the last was written (38 ms after tokenizing of a 50 MB conversion's 360 here,
        # 28 on four threads; benchmarks/RESULTS.md, "Decisions").
        prepared = getattr(body, "prepared", None)

        def written(task: ShardTask) -> ShardResult:
            made = prepared(task) if prepared is not None else None
            if made is not None:  # written whole already (a local text run's): renamed
                path, result = made
                result = adopt_shard(task, path, result, out_dir)
            else:
                result = write_shard(task, body, out_dir)
            storage.sync_files([storage.join(out_dir, task.filename)])
            return result

        # Four at most (what was measured, on 2 cores): a many-core host's writers would all
        # stream to one disk. On an error or an interrupt, map cancels the shards not begun.
        writers = min(4, 2 * self.run.worker_count())
        with ThreadPoolExecutor(writers, thread_name_prefix="feedgpu-shard") as pool:
            return list(pool.map(written, todo))
