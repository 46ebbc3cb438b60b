"""What does exact mid-epoch resume cost: saved state and resume time, against restarting the
epoch and against a `tf.train.Checkpoint` of the same pipeline's iterator?

The benchmark image set (bench_pipeline's: --images generated 500x375 JPEGs), the default
training spec (`PipelineSpec.for_dataset(..., training=True)`: cache in memory, shuffled files
and examples, augmentation) with a seed, batches of --batch at 224x224. Every timing starts from
a freshly built pipeline, as a restarted process does (empty cache). At each fraction f of an
epoch (k batches consumed):
  ours: the `InputPosition` checkpointed (bytes, save ms); resume = a pipeline built at the
      position, time to its first batch, minus a pipeline at the epoch's start to its first
      batch (both fill the same shuffle buffer): the cost of skipping k batches' records.
  (a) restart the epoch: a fresh pipeline's time to deliver k batches, which a restart redoes
      (besides the model's k steps, not counted here, and the examples then seen twice).
  (b) `tf.train.Checkpoint(iterator=...)` of the same pipeline built without a position, after
      k batches: checkpoint bytes, save seconds, and restore-to-first-batch seconds.
Targets: state < 64 KB; resume cost at 50% < 10% of (a) at 50%.

Usage: python benchmarks/bench_resume.py [--images 3000] [--batch 128] [--rounds 3] [--data DIR]
       [--fractions 0.1,0.5,0.9] [--shuffle-buffer N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ResumeRow:
    """Medians at one fraction of an epoch."""

    fraction: float
    batches: int
    state_bytes: int
    state_save_ms: float
    first_batch_s: float
    resume_cost_s: float
    restart_s: float
    iterator_bytes: int
    iterator_save_s: float
    iterator_restore_s: float

    @property
    def cost_vs_restart(self) -> float:
        return self.resume_cost_s / self.restart_s if self.restart_s else 0.0


def _dir_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))


def _first_batch_s(spec: Any, batches: int) -> float:
    import feedgpu

    position = feedgpu.InputPosition(spec)
    position.reset(batches)
    start = time.perf_counter()
    next(iter(feedgpu.build_pipeline(spec, position=position)))
    return time.perf_counter() - start


def _restart_s(spec: Any, batches: int) -> float:
    import feedgpu

    start = time.perf_counter()
    it = iter(feedgpu.build_pipeline(spec, position=feedgpu.InputPosition(spec)))
    for _ in range(batches):
        next(it)
    return time.perf_counter() - start


def _ours_state(spec: Any, batches: int, folder: str) -> tuple[int, float]:
    import tensorflow as tf

    import feedgpu

    position = feedgpu.InputPosition(spec)
    position.reset(batches)
    shutil.rmtree(folder, ignore_errors=True)
    start = time.perf_counter()
    tf.train.Checkpoint(input=position).write(os.path.join(folder, "input"))
    return _dir_bytes(folder), (time.perf_counter() - start) * 1e3


def _iterator_checkpoint(spec: Any, batches: int, folder: str) -> tuple[int, float, float]:
    """(bytes, save s, restore-to-first-batch s) of the plain pipeline's iterator."""
    import tensorflow as tf

    import feedgpu

    it = iter(feedgpu.build_pipeline(spec))
    for _ in range(batches):
        next(it)
    shutil.rmtree(folder, ignore_errors=True)
    start = time.perf_counter()
    path = tf.train.Checkpoint(iterator=it).write(os.path.join(folder, "iterator"))
    save = time.perf_counter() - start
    size = _dir_bytes(folder)
    del it
    start = time.perf_counter()
    again = iter(feedgpu.build_pipeline(spec))
    tf.train.Checkpoint(iterator=again).read(path).assert_consumed()
    next(again)
    return size, save, time.perf_counter() - start


def measure(
    data: str, batch: int, fractions: Sequence[float], rounds: int, buffer: int | None = None
) -> list[ResumeRow]:
    import feedgpu

    spec = feedgpu.PipelineSpec.for_dataset(data, batch_size=batch, training=True, seed=1)
    if buffer is not None:
        spec = spec.with_changes(shuffle_buffer=buffer)
    count = feedgpu.InputPosition(spec).batches_per_epoch
    print(spec, file=sys.stderr)
    scratch = tempfile.mkdtemp(prefix="bench_resume_")
    runs: dict[float, dict[str, list[float]]] = {f: {} for f in fractions}
    try:
        for r in range(rounds):
            for f in fractions if r % 2 == 0 else list(reversed(fractions)):
                k = max(1, round(f * count))
                got = runs[f]
                size, save_ms = _ours_state(spec, k, os.path.join(scratch, "ours"))
                got.setdefault("state_bytes", []).append(size)
                got.setdefault("state_save_ms", []).append(save_ms)
                at_start = _first_batch_s(spec, 0)
                at_k = _first_batch_s(spec, k)
                got.setdefault("first_batch_s", []).append(at_k)
                got.setdefault("resume_cost_s", []).append(max(0.0, at_k - at_start))
                got.setdefault("restart_s", []).append(_restart_s(spec, k))
                it_size, it_save, it_restore = _iterator_checkpoint(
                    spec, k, os.path.join(scratch, "iterator")
                )
                got.setdefault("iterator_bytes", []).append(it_size)
                got.setdefault("iterator_save_s", []).append(it_save)
                got.setdefault("iterator_restore_s", []).append(it_restore)
                line = ", ".join(f"{name} {v[-1]:.4g}" for name, v in got.items())
                print(f"round {r + 1}, {f:.0%} ({k} of {count} batches): {line}", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = []
    for f in fractions:
        med = {name: statistics.median(v) for name, v in runs[f].items()}
        rows.append(
            ResumeRow(
                fraction=f,
                batches=max(1, round(f * count)),
                state_bytes=int(med["state_bytes"]),
                state_save_ms=round(med["state_save_ms"], 2),
                first_batch_s=round(med["first_batch_s"], 3),
                resume_cost_s=round(med["resume_cost_s"], 3),
                restart_s=round(med["restart_s"], 3),
                iterator_bytes=int(med["iterator_bytes"]),
                iterator_save_s=round(med["iterator_save_s"], 3),
                iterator_restore_s=round(med["iterator_restore_s"], 3),
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> list[ResumeRow]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fractions", default="0.1,0.5,0.9")
    parser.add_argument(
        "--shuffle-buffer",
        type=int,
        help="override the spec's buffer (the default holds all of a 3,000-image split, so "
        "every first batch reads the whole split; a smaller one shows what skipping costs)",
    )
    parser.add_argument("--data", help="folder to keep generated data in between runs")
    args = parser.parse_args(argv)
    from bench_data import converted_images

    tmp = tempfile.mkdtemp(prefix="bench_resume_data_")
    root = args.data or tmp
    try:
        out = converted_images(root, args.images)
        fractions = [float(f) for f in args.fractions.split(",") if f]
        rows = measure(out, args.batch, fractions, args.rounds, args.shuffle_buffer)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps([asdict(r) for r in rows], indent=2))
    for r in rows:
        print(
            f"{r.fraction:.0%} of an epoch ({r.batches} batches): ours {r.state_bytes} B saved "
            f"in {r.state_save_ms:.1f} ms, resume cost {r.resume_cost_s:.3f} s "
            f"(first batch {r.first_batch_s:.3f} s); (a) restart redoes {r.restart_s:.3f} s; "
            f"(b) iterator checkpoint {r.iterator_bytes / 1e6:.1f} MB, saved in "
            f"{r.iterator_save_s:.3f} s, restored to a batch in {r.iterator_restore_s:.3f} s"
        )
    mid = min(rows, key=lambda r: abs(r.fraction - 0.5))
    print(
        f"state {max(r.state_bytes for r in rows)} B (target < 65536); resume cost at "
        f"{mid.fraction:.0%} = {mid.cost_vs_restart:.3f} of (a) (target < 0.10)"
    )
    return rows


if __name__ == "__main__":
    main()
