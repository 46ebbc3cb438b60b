"""Conversion on Apache Beam: the very shard tasks of the local runs, as Beam pipelines.

Each task's shard is committed by the same `write_shard` a pool worker calls (temporary name,
result sidecar, rename), with the converter's own shard body, so the output is byte for byte the
local run's; the driver then collects results the way a resumed run does (re-reading each
finished shard's CRCs). Both converters use `write_shards_on_beam`; text runs its tokenizing
chunks through `run_on_beam` first. DirectRunner here; Dataflow, Flink or
Spark by passing their options. Optional: the [beam] extra.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
from collections.abc import Callable, Sequence
from typing import Any

from feedgpu.chatter import BEAM_CHATTER, filtered_native_stderr
from feedgpu.convert.commit import Progress, ShardBody, ShardResult, load_finished, write_shard
from feedgpu.convert.plan import ShardTask
from feedgpu.errors import DatasetError, InputError, UsageError

logger = logging.getLogger(__name__)
DEFAULT_OPTIONS = (
    "--runner=DirectRunner --direct_num_workers=0 --direct_running_mode=multi_threading"
)
INSTALL = "pip install 'apache-beam[tfrecord]' (the [beam] extra)"


def beam_flags(options: str | None, quiet: bool) -> str:
    """The Beam flags to run with: the user's (else DirectRunner here); when quiet, Beam's
    workers log warnings only (their INFO lines, such as "Python sdk harness exiting.", would
    otherwise print however quiet the conversion was asked to be)."""
    flags = options if options is not None else DEFAULT_OPTIONS
    if quiet and "sdk_harness_log_level" not in flags:
        flags += " --default_sdk_harness_log_level=WARNING"
    return flags


def require_beam() -> None:
    """A one-line error saying how to install Apache Beam, unless it is installed.

    Only looked up, not imported: importing it logs warnings of its own (run_on_beam imports
    it where a quiet run hides them)."""
    import importlib.util

    if importlib.util.find_spec("apache_beam") is None:
        raise UsageError(f"--runner beam needs Apache Beam: {INSTALL}")


def run_on_beam(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    options: str | None,
    label: str,
    *,
    quiet: bool = False,
) -> None:
    """Run fn on every item as a Beam pipeline and wait for it.

    Raises:
        InputError: fn raised InputError (--strict) on a worker.
        DatasetError: the pipeline failed otherwise.
    """
    require_beam()
    argv = shlex.split(options if options is not None else DEFAULT_OPTIONS)
    chatter = filtered_native_stderr(BEAM_CHATTER) if quiet else contextlib.nullcontext()
    try:
        with chatter:
            _run_pipeline(fn, items, argv, label)
    except InputError:
        raise
    except Exception as e:  # a worker's error arrives wrapped by the runner
        cause = _find_cause(e)
        if isinstance(cause, InputError):
            raise InputError(str(cause)) from e
        raise DatasetError(f"the Beam pipeline failed: {str(e).splitlines()[0][:300]}") from e


def _run_pipeline(
    fn: Callable[[Any], Any], items: Sequence[Any], argv: list[str], label: str
) -> None:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    with beam.Pipeline(options=PipelineOptions(argv)) as pipeline:
        _ = (
            pipeline
            | f"{label} tasks" >> beam.Create(list(items), reshuffle=False)
            | "spread" >> beam.Reshuffle()  # one task per worker bundle
            | label >> beam.Map(fn)
        )


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
    """A picklable Beam function: one ShardTask committed to its shard file."""

    def __init__(self, body: ShardBody, out_dir: str) -> None:
        self.body, self.out_dir = body, out_dir

    def __call__(self, task: ShardTask) -> str:
        write_shard(task, self.body, self.out_dir)
        return task.filename


def write_shards_on_beam(
    body: ShardBody,
    out_dir: str,
    todo: Sequence[ShardTask],
    options: str | None,
    on_progress: Progress,
    *,
    quiet: bool = False,
) -> list[ShardResult]:
    """Write each task's shard on Beam workers (options: Beam's own flags), then collect the
    results as a resumed run would.

    Raises:
        InputError: --strict and an input could not be converted.
        DatasetError: the pipeline failed, or a shard it should have written is not there.
    """
    if todo:
        run_on_beam(_WriteShard(body, out_dir), todo, options, "write shards", quiet=quiet)
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
