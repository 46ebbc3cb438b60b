"""The files a conversion writes last, in this order: skipped.jsonl, the TFDS metadata, and
the manifest (whose presence marks a finished dataset)."""

from __future__ import annotations

import functools
import json
import sys
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from feedgpu import storage
from feedgpu.convert.commit import WORK_DIR, ShardResult
from feedgpu.convert.execute import StageOutput
from feedgpu.convert.kept import check_kept
from feedgpu.convert.plan import DatasetPlan
from feedgpu.convert.summary import Summary
from feedgpu.format import names
from feedgpu.format.index import index_path
from feedgpu.format.manifest import FORMAT_VERSION, Manifest, ShardInfo, SplitInfo
from feedgpu.format.tfds import write_tfds_metadata


def finalize(
    plan: DatasetPlan, results: Sequence[ShardResult], output: StageOutput, allow_skips: bool
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
    storage.write_atomic(storage.join(out, names.SKIPPED), lines.encode("utf-8"))
    kept = output.text.documents if output.text else sum(r.num_records for r in results)
    check_kept(kept, skips, out, plan.converter, allow=allow_skips)

    shards: dict[str, list[ShardInfo]] = {}
    summary = Summary(output.statistics)
    for task in sorted(plan.tasks, key=lambda t: names.split_order(t.split)):
        r = by_file[task.filename]
        index = index_path(r.filename) if task.indexed else None
        if r.num_examples is None:
            info = ShardInfo(r.filename, r.num_records, r.num_bytes, index)
        else:
            info = ShardInfo(r.filename, r.num_examples, r.num_bytes, index, r.num_records)
        shards.setdefault(task.split, []).append(info)
        if output.statistics is None:
            summary.merge(Summary(r.stats))
    splits = {name: SplitInfo(tuple(infos)) for name, infos in shards.items()}
    write_tfds_metadata(
        out,
        name=plan.name,
        schema=plan.schema,
        splits={k: [(s.num_records, s.num_bytes) for s in v.shards] for k, v in splits.items()},
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
            **library_versions_soon().result(),
        },
        tokenizer=output.tokenizer or plan.tokenizer,
        text=output.text,
        # Blocks need format 3's readers; without them, format 2's can read it.
        format_version=FORMAT_VERSION if plan.schema.blocks else 2,
    )
    # The manifest says "complete": everything it describes reaches the disk before it does.
    storage.sync_files([storage.join(out, n) for n in storage.listdir(out) if n != WORK_DIR])
    manifest.write(out)
    storage.remove(storage.join(out, WORK_DIR))
    return manifest


@functools.cache  # once a process (called on the thread that converts)
def library_versions_soon() -> Future[dict[str, str]]:
    """The manifest's library versions, looked up on a thread of their own: importlib.metadata
    takes ~20 ms at its first use, which a conversion would otherwise spend at its very end,
    with one core waiting."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="feedgpu-versions")
    versions = pool.submit(_library_versions)
    pool.shutdown(wait=False)  # its thread ends with the lookup
    return versions


def _library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("tensorflow", "pillow", "tokenizers"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out
