"""One conversion run: the output folder's state, resume, progress and the report.

Order on disk is what makes a run crash-safe: shards appear (atomically) as they finish, then
skipped.jsonl and the TFDS metadata, and the manifest last. A folder with a manifest is a finished
dataset; one with a work folder is an interrupted run that the same command resumes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from feedgpu import storage
from feedgpu.convert.commit import WORK_DIR, ShardBody, load_finished
from feedgpu.convert.execute import ShardStage, ShardWriter, shard_writer
from feedgpu.convert.finalize import finalize, library_versions_soon
from feedgpu.convert.plan import DatasetPlan, output_fingerprint
from feedgpu.convert.run_options import RunOptions
from feedgpu.errors import DatasetError
from feedgpu.format import names
from feedgpu.format.index import INDEX_SUFFIX
from feedgpu.format.manifest import Manifest, read_manifest
from feedgpu.progress import progress_bar

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConversionReport:
    """What a run did, for the CLI's summary and `--json`."""

    out_dir: str
    already_done: bool
    num_inputs: int
    num_examples: int
    num_skipped: int
    skipped_by_reason: dict[str, int]
    examples_by_split: dict[str, int]
    num_shards: int
    num_bytes: int
    seconds: float
    stages_s: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Machine-readable summary (a dict; `json.dumps` it to print). A re-run that found the
        dataset done converted nothing: it has no rate."""
        converted = not self.already_done and self.seconds > 0
        rate = round(self.num_inputs / self.seconds, 1) if converted else None
        stages = {k: round(v, 3) for k, v in self.stages_s.items()}
        seconds = round(self.seconds, 3)
        return {**self.__dict__, "inputs_per_s": rate, "seconds": seconds, "stages_s": stages}


_METADATA_FILES = (
    "dataset_info.json",
    "features.json",
    "tokenizer.json",
    "vocab.txt",
    names.MANIFEST,
    names.SKIPPED,
)


def _remove_dataset(out_dir: str) -> None:
    """Delete what feedgpu writes in out_dir, and nothing else."""
    for name in storage.listdir(out_dir):
        if (
            names.is_shard_filename(name)
            or names.is_shard_filename(name.removesuffix(INDEX_SUFFIX))
            or (".tfrecord-" in name and ".tmp-" in name)
            or name in _METADATA_FILES
            or name.endswith(".labels.txt")
            or name == WORK_DIR
        ):
            storage.remove(storage.join(out_dir, name))


def _remove_temporaries(out_dir: str) -> None:
    for name in storage.listdir(out_dir):
        if ".tmp-" in name:
            storage.remove(storage.join(out_dir, name))


def _describe_change(old: Manifest, options: Mapping[str, Any], inputs: str, out: str) -> str:
    changed = sorted(
        k for k in set(old.options) | set(options) if old.options.get(k) != options.get(k)
    )
    if changed:
        pairs = ", ".join(f"{k} {old.options.get(k)!r} -> {options.get(k)!r}" for k in changed)
        if changed == ["index"] and options.get("index"):
            return f"options differ ({pairs}: feedgpu index {out} adds the indexes)"
        return f"options differ ({pairs})"
    if old.inputs_fingerprint != inputs:
        return "the input files changed"
    return "the dataset name differs"


def finished_dataset(
    out: str, options: Sequence[Mapping[str, Any]], inputs: str, name: str, overwrite: bool
) -> Manifest | None:
    """The finished dataset in out if it is the one asked for (its recorded options one of
    options, the same inputs and name, every shard there); None if out holds none, or one
    to be replaced (overwrite). Checked before any long work too (a tokenizer trained).

    Raises:
        DatasetError: out holds another finished dataset and overwrite is False.
    """
    if not storage.exists(storage.join(out, names.MANIFEST)):
        return None
    old = read_manifest(out)
    present = set(storage.listdir(out))
    shards_present = all(s.file in present for sp in old.splits.values() for s in sp.shards)
    same = [o for o in options if output_fingerprint(o, inputs, name) == old.fingerprint]
    if same and shards_present and not overwrite:
        return old
    if not overwrite:
        why = (
            _describe_change(old, options[0], inputs, out)
            if shards_present
            else "shard files are missing"
        )
        raise DatasetError(
            f"{out} already holds a feedgpu dataset but {why}; "
            "use --overwrite to replace it, or choose another output folder"
        )
    return None


def _prepare(plan: DatasetPlan, overwrite: bool) -> bool:
    """Make out_dir ready for this plan; True if it already holds exactly this dataset."""
    out = plan.out_dir
    storage.makedirs(out)
    present = storage.listdir(out)
    if names.MANIFEST in present:
        if finished_dataset(out, [plan.options], plan.inputs_fingerprint, plan.name, overwrite):
            if WORK_DIR in present:
                storage.remove(storage.join(out, WORK_DIR))
            return True
        _remove_dataset(out)
    elif WORK_DIR in present:
        plan_file = storage.join(out, WORK_DIR, "plan.json")
        previous = json.loads(storage.read_bytes(plan_file)) if storage.exists(plan_file) else {}
        if previous.get("fingerprint") != plan.fingerprint or overwrite:
            logger.info("discarding an interrupted conversion made with other inputs or options")
            _remove_dataset(out)
    elif [n for n in present if not n.startswith(".")] and not overwrite:
        raise DatasetError(
            f"{out} is not empty and is not a feedgpu dataset; "
            "choose an empty or new folder (or pass --overwrite to write into it anyway)"
        )
    _remove_temporaries(out)
    storage.makedirs(storage.join(out, WORK_DIR))
    storage.write_json(storage.join(out, WORK_DIR, "plan.json"), {"fingerprint": plan.fingerprint})
    return False


def write_dataset(
    plan: DatasetPlan | Callable[[], DatasetPlan],
    work: ShardBody | ShardStage,
    run: RunOptions,
    *,
    unit: str = "img",
    rate_unit: str = "MB/s",
    started: float | None = None,
) -> ConversionReport:
    """Write (or finish, or confirm) the dataset a plan describes, on the executor `run`
    chooses (`execute.shard_writer`: Beam, the local pool, or this process).

    Args:
        plan: the plan, or the function making it: the executor then starts first (a local
            pool's workers load their decoders while the source is listed). The report's
            time is the whole conversion's, planning included as "listing" (less the parts
            the plan timed itself, `DatasetPlan.stages_s`).
        work: one shard's records (an `ItemShardBody` runs in the local pool), or a
            `ShardStage` that runs first and yields them (text's tokenizing).
        unit: what the progress bar counts (the first number a runner reports).
        rate_unit: the second number a runner reports, shown per second in millions
            (bytes read for images, tokens for text).
        started: `time.perf_counter()` when the converter began, if it planned before.

    Raises:
        DatasetError: out_dir holds something else and overwrite is False.
        InputError: with strict, a bad input; unless allow_skips, too little kept (`check_kept`).
    """
    with shard_writer(work, run) as writer:
        # The manifest's, looked up meanwhile: on a thread started once a local pool's workers
        # are forked (a thread running then makes the pool spawn them, `ShardPool`).
        library_versions_soon()
        first = time.perf_counter() if started is None else started
        timed = started is not None or not isinstance(plan, DatasetPlan)  # planning's time known
        plan = plan if isinstance(plan, DatasetPlan) else plan()
        start = time.perf_counter()
        parts = dict(plan.stages_s)
        if timed:
            parts["listing"] = start - first - sum(parts.values())
        return _write(plan, writer, run, first, start, parts, unit, rate_unit)


def _write(
    plan: DatasetPlan,
    writer: ShardWriter,
    run: RunOptions,
    first: float,
    start: float,
    parts: dict[str, float],
    unit: str,
    rate_unit: str,
) -> ConversionReport:
    def report(manifest: Manifest, already_done: bool) -> ConversionReport:
        now = time.perf_counter()
        return _report(
            plan,
            manifest,
            already_done=already_done,
            seconds=now - first,
            stages_s={**parts, "conversion": now - start},
        )

    if _prepare(plan, run.overwrite):
        return report(read_manifest(plan.out_dir), already_done=True)
    finished = {t.filename: load_finished(plan.out_dir, t) for t in plan.tasks}
    todo = [t for t in plan.tasks if finished[t.filename] is None]
    if len(todo) < len(plan.tasks):
        done, planned = len(plan.tasks) - len(todo), len(plan.tasks)
        logger.info("resuming: %d of %d shards already written", done, planned)
    # Planned inputs are the bar's total; text plans none (documents are known once read).
    total = sum(len(t.items) for t in todo) if any(t.items for t in plan.tasks) else None
    amount = [0]
    bars: list[Any] = []  # made at the first report: tqdm loads while the workers run

    def on_progress(items: int, measured: int) -> None:
        if run.quiet:  # no bar: tqdm is not even imported (CPU the workers can use)
            return
        if not bars:
            bars.append(progress_bar(total, unit=unit, smoothing=0.1))
            bars[0].start_t -= time.perf_counter() - start  # its rates count from our start
        bar = bars[0]
        amount[0] += measured
        elapsed = max(time.perf_counter() - start, 1e-6)
        bar.set_postfix_str(f"{amount[0] / elapsed / 1e6:.2f} {rate_unit}", refresh=False)
        bar.update(items)

    try:
        output, results = writer(plan.out_dir, todo, on_progress)
    except BaseException:
        _remove_temporaries(plan.out_dir)
        raise
    finally:
        for bar in bars:
            bar.close()
    all_results = [*(r for r in finished.values() if r is not None), *results]
    return report(finalize(plan, all_results, output, run.allow_skips), already_done=False)


def _report(
    plan: DatasetPlan,
    manifest: Manifest,
    *,
    already_done: bool,
    seconds: float,
    stages_s: dict[str, float],
) -> ConversionReport:
    # Inputs: every one was converted or skipped. A text document can make several examples.
    converted = manifest.text.documents if manifest.text else manifest.num_examples
    return ConversionReport(
        out_dir=plan.out_dir,
        already_done=already_done,
        num_inputs=converted + manifest.num_skipped,
        num_examples=manifest.num_examples,
        num_skipped=manifest.num_skipped,
        skipped_by_reason=dict(manifest.skipped),
        examples_by_split={k: v.num_examples for k, v in manifest.splits.items()},
        num_shards=sum(len(v.shards) for v in manifest.splits.values()),
        num_bytes=sum(v.num_bytes for v in manifest.splits.values()),
        seconds=seconds,
        stages_s=stages_s,
    )
