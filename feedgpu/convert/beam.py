"""Conversion on Apache Beam: the very shard tasks of the local pool, as a Beam pipeline.

Each task writes its shard exactly as a pool worker does (temporary name, result sidecar, rename),
so the output is byte for byte the local runner's, and the driver then collects results the way a
resumed run does (re-reading each finished shard's CRCs). DirectRunner here; Dataflow, Flink or
Spark by passing their options. Optional: `pip install 'feedgpu[beam]'`.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable, Sequence
from typing import Any

from feedgpu.convert.run import RunOutput, ShardRunner
from feedgpu.convert.shards import Progress, ShardProcessor, ShardTask, load_finished, write_shard
from feedgpu.errors import DatasetError, InputError, UsageError

logger = logging.getLogger(__name__)
DEFAULT_OPTIONS = (
    "--runner=DirectRunner --direct_num_workers=0 --direct_running_mode=multi_threading"
)
INSTALL = "pip install 'feedgpu[beam]' (Apache Beam with TFRecord support)"


def require_beam() -> Any:
    """The apache_beam module, or a one-line error saying how to install it."""
    try:
        import apache_beam
    except ImportError as e:
        raise UsageError(f"--runner beam needs Apache Beam: {INSTALL}") from e
    return apache_beam


def run_on_beam(
    fn: Callable[[Any], Any], items: Sequence[Any], options: str | None, label: str
) -> None:
    """Run fn on every item as a Beam pipeline and wait for it.

    Raises:
        InputError: fn raised InputError (--strict) on a worker.
        DatasetError: the pipeline failed otherwise.
    """
    beam = require_beam()
    from apache_beam.options.pipeline_options import PipelineOptions

    argv = shlex.split(options if options is not None else DEFAULT_OPTIONS)
    try:
        with beam.Pipeline(options=PipelineOptions(argv)) as pipeline:
            _ = (
                pipeline
                | f"{label} tasks" >> beam.Create(list(items), reshuffle=False)
                | "spread" >> beam.Reshuffle()  # one task per worker bundle
                | label >> beam.Map(fn)
            )
    except InputError:
        raise
    except Exception as e:  # a worker's error arrives wrapped by the runner
        cause = _find_cause(e)
        if isinstance(cause, InputError):
            raise InputError(str(cause)) from e
        raise DatasetError(f"the Beam pipeline failed: {str(e).splitlines()[0][:300]}") from e


def _find_cause(error: BaseException) -> BaseException:
    seen = set()
    while id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, InputError):
            return error
        nxt = error.__cause__ or error.__context__
        if nxt is None:
            break
        error = nxt
    return error


class _WriteShard:
    """A picklable Beam function: one ShardTask to its shard file."""

    def __init__(self, processor: ShardProcessor, out_dir: str, strict: bool) -> None:
        self.processor, self.out_dir, self.strict = processor, out_dir, strict

    def __call__(self, task: ShardTask) -> str:
        write_shard(task, self.processor, self.out_dir, strict=self.strict)
        return task.filename


def beam_runner(
    processor: ShardProcessor, out_dir: str, *, strict: bool, options: str | None = None
) -> ShardRunner:
    """A runner writing each unfinished shard in a Beam pipeline (options: Beam's own flags)."""
    require_beam()

    def run(todo: Sequence[ShardTask], on_progress: Progress) -> RunOutput:
        if todo:
            run_on_beam(_WriteShard(processor, out_dir, strict), todo, options, "write shards")
        return RunOutput(collect_results(out_dir, todo, on_progress))

    return run


def collect_results(out_dir: str, todo: Sequence[ShardTask], on_progress: Progress) -> list[Any]:
    """Results of shards written by remote workers, checked like a resumed run's."""
    results = []
    for task in todo:
        result = load_finished(out_dir, task)
        if result is None:
            raise DatasetError(
                f"the Beam pipeline finished but {task.filename} is missing or damaged; "
                "re-run the same command to write it"
            )
        on_progress(len(task.items), result.num_bytes)
        results.append(result)
    return results
