"""One conversion run: the output folder's state, resume, and the files written last.

Order on disk is what makes a run crash-safe: shards appear (atomically) as they finish, then
skipped.jsonl and the TFDS metadata, and the manifest last. A folder with a manifest is a finished
dataset; one with a work folder is an interrupted run that the same command resumes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from feedgpu import storage
from feedgpu.convert.commit import WORK_DIR, Progress, ShardResult, load_finished
from feedgpu.convert.kept import check_kept
from feedgpu.convert.plan import ShardTask, Skip
from feedgpu.convert.summary import Summary
from feedgpu.errors import DatasetError, UsageError
from feedgpu.format import layout as fmt
from feedgpu.format.index import INDEX_SUFFIX, index_path
from feedgpu.format.manifest import (
    Manifest,
    ShardInfo,
    SplitInfo,
    TextStatistics,
    TokenizerInfo,
    read_manifest,
)
from feedgpu.progress import progress_bar

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetPlan:
    """Everything a converter decided before any example is written.

    Attributes:
        out_dir: the output folder.
        name: dataset name (TFDS-safe).
        converter: "images" or "text".
        source: the input folder, as given.
        options: the options that change the bytes written (compared on re-runs).
        inputs_fingerprint: hash of the input listing (paths, sizes, mtimes).
        features: the example fields.
        label_names: class names, index = label.
        supervised_keys: (input, label) feature names for `as_supervised=True`, if labelled.
        tasks: the shards to write.
        listing_skips: inputs rejected while listing (hidden, wrong extension, ...).
        tokenizer: for text, the tokenizer and the ids readers need.
    """

    out_dir: str
    name: str
    converter: str
    source: str
    options: Mapping[str, Any]
    inputs_fingerprint: str
    features: Sequence[fmt.Feature]
    label_names: Sequence[str]
    supervised_keys: tuple[str, str] | None
    tasks: Sequence[ShardTask]
    listing_skips: Sequence[Skip] = ()
    tokenizer: TokenizerInfo | None = None

    @property
    def fingerprint(self) -> str:
        """Identity of the output: options plus inputs."""
        key = json.dumps([self.options, self.inputs_fingerprint, self.name], sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()


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
    fmt.MANIFEST,
    fmt.SKIPPED,
)


def _remove_dataset(out_dir: str) -> None:
    """Delete what feedgpu writes in out_dir, and nothing else."""
    for name in storage.listdir(out_dir):
        if (
            fmt.is_shard_filename(name)
            or fmt.is_shard_filename(name.removesuffix(INDEX_SUFFIX))
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


def _describe_change(old: Manifest, plan: DatasetPlan) -> str:
    changed = sorted(
        k for k in set(old.options) | set(plan.options) if old.options.get(k) != plan.options.get(k)
    )
    if changed:
        pairs = ", ".join(f"{k} {old.options.get(k)!r} -> {plan.options.get(k)!r}" for k in changed)
        if changed == ["index"] and plan.options.get("index"):
            return f"options differ ({pairs}: feedgpu index {plan.out_dir} adds the indexes)"
        return f"options differ ({pairs})"
    if old.inputs_fingerprint != plan.inputs_fingerprint:
        return "the input files changed"
    return "the dataset name differs"


def _prepare(plan: DatasetPlan, overwrite: bool) -> bool:
    """Make out_dir ready for this plan; True if it already holds exactly this dataset."""
    out = plan.out_dir
    storage.makedirs(out)
    names = storage.listdir(out)
    if fmt.MANIFEST in names:
        old = read_manifest(out)
        shards_present = all(s.file in names for sp in old.splits.values() for s in sp.shards)
        if old.fingerprint == plan.fingerprint and shards_present and not overwrite:
            if WORK_DIR in names:
                storage.remove(storage.join(out, WORK_DIR))
            return True
        if not overwrite:
            why = _describe_change(old, plan) if shards_present else "shard files are missing"
            raise DatasetError(
                f"{out} already holds a feedgpu dataset but {why}; "
                "use --overwrite to replace it, or choose another output folder"
            )
        _remove_dataset(out)
    elif WORK_DIR in names:
        plan_file = storage.join(out, WORK_DIR, "plan.json")
        previous = json.loads(storage.read_bytes(plan_file)) if storage.exists(plan_file) else {}
        if previous.get("fingerprint") != plan.fingerprint or overwrite:
            logger.info("discarding an interrupted conversion made with other inputs or options")
            _remove_dataset(out)
    elif [n for n in names if not n.startswith(".")] and not overwrite:
        raise DatasetError(
            f"{out} is not empty and is not a feedgpu dataset; "
            "choose an empty or new folder (or pass --overwrite to write into it anyway)"
        )
    _remove_temporaries(out)
    storage.makedirs(storage.join(out, WORK_DIR))
    fmt.write_json(storage.join(out, WORK_DIR, "plan.json"), {"fingerprint": plan.fingerprint})
    return False


def _finalize(
    plan: DatasetPlan, results: Sequence[ShardResult], output: RunOutput, allow_skips: bool
) -> Manifest:
    """Write skipped.jsonl, TFDS metadata and, last, the manifest (see `check_kept`: a run
    that kept too little stops before the metadata, its shards kept for a re-run)."""
    out = plan.out_dir
    by_file = {r.filename: r for r in results}
    skips = sorted(
        [*plan.listing_skips, *output.skips, *(s for r in results for s in r.skips)],
        key=lambda s: s.path,
    )
    lines = "".join(
        json.dumps({"path": s.path, "reason": s.reason, "detail": s.detail}, ensure_ascii=False)
        + "\n"
        for s in skips
    )
    storage.write_atomic(storage.join(out, fmt.SKIPPED), lines.encode("utf-8"))
    kept = output.text.documents if output.text else sum(r.num_records for r in results)
    check_kept(kept, skips, out, plan.converter, allow=allow_skips)

    shards: dict[str, list[ShardInfo]] = {}
    summary = Summary()
    for task in sorted(plan.tasks, key=lambda t: fmt.split_order(t.split)):
        r = by_file[task.filename]
        index = index_path(r.filename) if task.indexed else None
        info = ShardInfo(r.filename, r.num_records, r.num_bytes, index)
        shards.setdefault(task.split, []).append(info)
        summary.merge(Summary(r.stats))
    splits = {name: SplitInfo(tuple(infos)) for name, infos in shards.items()}
    fmt.write_tfds_metadata(
        out,
        name=plan.name,
        features=plan.features,
        splits={k: [(s.num_examples, s.num_bytes) for s in v.shards] for k, v in splits.items()},
        label_names=plan.label_names,
        supervised_keys=plan.supervised_keys,
        description=f"Converted by feedgpu convert {plan.converter} from {plan.source}",
    )
    from feedgpu import __version__

    manifest = Manifest(
        name=plan.name,
        converter=plan.converter,
        source=plan.source,
        options=dict(plan.options),
        inputs_fingerprint=plan.inputs_fingerprint,
        fingerprint=plan.fingerprint,
        features=tuple(plan.features),
        label_names=tuple(plan.label_names),
        splits=splits,
        statistics=summary.to_json(),
        skipped=dict(sorted(Counter(s.reason for s in skips).items())),
        num_skipped=len(skips),
        versions={
            "feedgpu": __version__,
            "python": sys.version.split()[0],
            **_library_versions(),
        },
        tokenizer=output.tokenizer or plan.tokenizer,
        text=output.text,
    )
    # The manifest says "complete": everything it describes reaches the disk before it does.
    storage.sync_files([storage.join(out, n) for n in storage.listdir(out) if n != WORK_DIR])
    manifest.write(out)
    storage.remove(storage.join(out, WORK_DIR))
    return manifest


def _library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("tensorflow", "pillow", "tokenizers"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


@dataclass
class RunOutput:
    """What a runner wrote: shard results, inputs skipped outside any shard, and for text the
    tokenizer as used (its parity check included) and statistics of what is stored."""

    results: list[ShardResult]
    skips: list[Skip] = field(default_factory=list)
    tokenizer: TokenizerInfo | None = None
    text: TextStatistics | None = None


class ShardRunner(Protocol):
    """Writes the shards of `todo` (the ones not finished by an earlier run)."""

    def __call__(self, todo: Sequence[ShardTask], on_progress: Progress) -> RunOutput: ...


RUNNERS = ("local", "beam")


def check_runner(runner: str) -> None:
    """Raise UsageError unless runner names a known executor."""
    if runner not in RUNNERS:
        raise UsageError(f"runner {runner!r}: choose {' or '.join(RUNNERS)}")


def write_dataset(
    plan: DatasetPlan,
    runner: ShardRunner,
    *,
    overwrite: bool = False,
    allow_skips: bool = False,
    quiet: bool = False,
    unit: str = "img",
    rate_unit: str = "MB/s",
    started: float | None = None,
    stages_s: Mapping[str, float] | None = None,
) -> ConversionReport:
    """Write (or finish, or confirm) the dataset a plan describes.

    Args:
        runner: writes the unfinished shards (`ShardPool` for per-item processors; the
            text converter tokenizes in batches).
        unit: what the progress bar counts (the first number a runner reports).
        rate_unit: the second number a runner reports, shown per second in millions
            (bytes read for images, tokens for text).
        started: `time.perf_counter()` when the converter began (listing, planning): the
            report's time is the whole conversion's, with this part as "listing".
        stages_s: parts of that time the converter measured itself (say, "tokenizer").
        allow_skips: finish a run that skipped more inputs for one reason than it kept.

    Raises:
        DatasetError: out_dir holds something else and overwrite is False.
        InputError: with strict, a bad input; unless allow_skips, too little kept (`check_kept`).
    """
    start = time.perf_counter()
    parts = dict(stages_s or {})
    if started is not None:
        parts["listing"] = start - started - sum(parts.values())
    first = start if started is None else started

    def report(manifest: Manifest, already_done: bool) -> ConversionReport:
        now = time.perf_counter()
        return _report(
            plan,
            manifest,
            already_done=already_done,
            seconds=now - first,
            stages_s={**parts, "conversion": now - start},
        )

    if _prepare(plan, overwrite):
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
        if quiet:  # no bar: tqdm is not even imported (~25 ms of CPU the workers can use)
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
        output = runner(todo, on_progress)
    except BaseException:
        _remove_temporaries(plan.out_dir)
        raise
    finally:
        for bar in bars:
            bar.close()
    all_results = [*(r for r in finished.values() if r is not None), *output.results]
    return report(_finalize(plan, all_results, output, allow_skips), already_done=False)


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
