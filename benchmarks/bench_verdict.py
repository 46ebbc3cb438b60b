"""Does bench-input measure the input wait that is really there, and judge it right?

A known stall is injected into the pipeline (a C++ sleep per batch after the prefetch, where
nothing can hide it: `StageChanges(delay_s=(("stall", d),))`) sized to a grid of shares of the
step time (0%, 3%, 10%, 30%, 60%), and bench-input's measured input share and verdict are printed
beside it. The 0% row is the baseline measured in the same run: its compute time sizes the
stalls, and its own input wait w0 per step (the real pipeline's, which the stall adds to) gives
the expected share of each row: (d + w0) per step over the row's measured step time. Errors
are reported against the injected share alone and against that expectation; the verdict must
match the expectation's (an "uncertain" verdict is right when its spread spans it: a share at a
threshold).
Target: worst absolute error <= 2 points; verdict right in every row.

`--stage batch` injects the delay in the batch stage instead, before the prefetch: the
pipeline then yields a batch every period p >= d (d = c / (1 - share), so the sleep alone is the
target share), and a model computing c a step waits p - c of each p: the expected share, with p
from the pipeline alone measured in the same run. This is where a prefetch buffer refilled
between measured rounds would hide the wait: end to end must never run faster than the
pipeline alone.

`--target keras` measures the same rows on a saved Keras model (the built-in CNN compiled and
saved as .keras, loaded by bench-input and trained by its own train_step); `--target dataset`
gives bench-input the stalled pipeline as a user's own tf.data dataset (`dataset=`).

Usage: python benchmarks/bench_verdict.py [--images 1024] [--seconds 5] [--shares 0,3,10,30,60]
           [--target builtin|keras|dataset] [--stage stall|batch] [--no-xla]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class VerdictRow:
    """One grid point: what was injected, what was expected and what was measured."""

    target_share: float
    delay_ms: float
    injected_share: float
    expected_share: float
    measured_share: float
    expected_verdict: str
    measured_verdict: str
    measured_range: tuple[str, str] = ("", "")  # the verdicts its share's spread spans

    @property
    def right(self) -> bool:
        """The verdict, or an "uncertain" one whose spread spans the expected verdict."""
        if self.measured_verdict == "uncertain":
            return self.expected_verdict in self.measured_range
        return self.expected_verdict == self.measured_verdict

    @property
    def error_vs_injected(self) -> float:
        return self.measured_share - self.injected_share

    @property
    def error_vs_expected(self) -> float:
        return self.measured_share - self.expected_share


@dataclass(frozen=True)
class VerdictBenchResult:
    rows: tuple[VerdictRow, ...]
    worst_error_vs_injected: float
    worst_error_vs_expected: float
    verdicts_right: int


def main(argv: Sequence[str] | None = None) -> VerdictBenchResult:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--shares", default="0,3,10,30,60", help="percent of step time")
    parser.add_argument("--model", default="small")
    parser.add_argument("--data", help="keep the generated dataset here")
    parser.add_argument("--target", choices=("builtin", "keras", "dataset"), default="builtin")
    parser.add_argument("--stage", choices=("stall", "batch"), default="stall")
    parser.add_argument("--xla", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(argv)

    import feedgpu
    from feedgpu.bench.device import resolve_devices
    from feedgpu.bench.measure import BenchOptions, bench_input
    from feedgpu.bench.report import verdict_for
    from feedgpu.pipeline.measure_hooks import StageChanges
    from feedgpu.samples import make_default_dataset

    workdir = args.data or tempfile.mkdtemp(prefix="bench-verdict-")
    # bench-input's own sample data (re-runs with --data reuse it: conversion is a no-op)
    data = make_default_dataset(workdir, images_per_class=args.images // 4)
    shares = [float(s) / 100 for s in args.shares.split(",")]
    if shares[0] != 0:
        shares.insert(0, 0.0)
    size = (args.image_size, args.image_size)

    setup = resolve_devices(feedgpu.DeviceConfig(xla=args.xla))
    model: object = args.model
    if args.target == "keras":
        import keras

        from feedgpu.bench.models import build_workload

        classes = len(feedgpu.read_manifest(data).label_names)
        saved = build_workload("image", args.model, setup, num_classes=classes, image_size=size)
        saved.model.compile(
            keras.optimizers.SGD(0.01, momentum=0.9),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        model = f"{workdir}/model.keras"
        saved.model.save(model)

    def run(delay: float) -> feedgpu.BenchReport:
        stages = StageChanges(delay_s=((args.stage, delay),)) if delay else StageChanges()
        if args.target == "dataset":
            spec = feedgpu.PipelineSpec.for_dataset(
                data, "train", batch_size=32, training=True, image_size=size, cache="memory",
                repeat=True, drop_remainder=True,
            )  # fmt: skip
            mine = feedgpu.build_pipeline(spec, None, stages)
            options = BenchOptions(model=model, seconds=args.seconds, ablation="never", quiet=True)
            return bench_input(dataset=mine, options=options, setup=setup)
        options = BenchOptions(
            model=model,
            seconds=args.seconds,
            ablation="never",
            quiet=True,
            overrides={"cache": "memory"}
            | ({} if args.target == "keras" else {"image_size": size}),
            stages=stages,
        )
        return bench_input(data, options, setup=setup)

    base = run(0.0)
    e = base.end_to_end
    wait0 = e.input_share * e.total_s / e.num_steps  # mean real input wait per step
    compute = e.total_s / e.num_steps - wait0  # mean compute per step
    rows = []
    fastest = []  # end to end over the pipeline alone, each row
    stall = args.stage == "stall"
    for target in shares:
        delay = target / (1 - target) * compute if stall or not target else compute / (1 - target)
        report = base if target == 0 else run(delay)
        r = report.end_to_end
        fastest.append(r.examples_per_s / report.pipeline.examples_per_s)
        injected = delay * r.num_steps / r.total_s
        # The stall plus the pipeline's own wait (per step, from the 0% row), as a share of
        # this run's measured step time (so a drift in compute time does not count as error).
        expected = (delay + wait0) * r.num_steps / r.total_s
        if not stall and target:
            # A batch every `delay` at best (the sleep's share); a model computing `compute`
            # a step, fed a batch every `period` (the pipeline alone, measured in the same
            # run), waits what its step does not fill of each period.
            injected = max(0.0, delay - compute) / max(delay, compute)
            period = report.batch_size / report.pipeline.examples_per_s
            expected = max(0.0, period - compute) / max(period, compute)
        rows.append(
            VerdictRow(
                target_share=target,
                delay_ms=1000 * delay,
                injected_share=injected,
                expected_share=expected,
                measured_share=r.input_share,
                expected_verdict=verdict_for(expected),
                measured_verdict=report.verdict,
                measured_range=report.verdict_range,
            )
        )
    if not args.data:
        shutil.rmtree(workdir, ignore_errors=True)
    result = VerdictBenchResult(
        rows=tuple(rows),
        worst_error_vs_injected=max(abs(r.error_vs_injected) for r in rows),
        worst_error_vs_expected=max(abs(r.error_vs_expected) for r in rows),
        verdicts_right=sum(r.right for r in rows),
    )
    print(
        f"model {base.model}, batch {base.batch_size}, {args.image_size}px, "
        f"compute {1000 * compute:.1f} ms/step, real input wait {1000 * wait0:.2f} ms/step"
    )
    print(
        f"{'target':>7} {'delay ms':>9} {'injected':>9} {'expected':>9} {'measured':>9} "
        f"{'err(inj)':>9} {'err(exp)':>9}  verdict (expected / measured)"
    )
    for r in rows:
        mark = "ok" if r.right else "WRONG"
        print(
            f"{r.target_share:>7.0%} {r.delay_ms:>9.2f} {r.injected_share:>9.1%} "
            f"{r.expected_share:>9.1%} {r.measured_share:>9.1%} "
            f"{100 * r.error_vs_injected:>+9.1f} {100 * r.error_vs_expected:>+9.1f}  "
            f"{r.expected_verdict} / {r.measured_verdict}"
            + (f" ({' to '.join(r.measured_range)})" if r.measured_verdict == "uncertain" else "")
            + f" {mark}"
        )
    print(
        "end to end / pipeline alone by row: "
        + ", ".join(f"{x:.2f}" for x in fastest)
        + " (above 1 beyond the spreads would be a refilled buffer counted as no wait)"
    )
    print(json.dumps({**asdict(result), "rows": [asdict(r) for r in rows]}))
    print(
        f"verdicts right {result.verdicts_right}/{len(rows)}; worst error "
        f"{100 * result.worst_error_vs_expected:.1f} points vs expected, "
        f"{100 * result.worst_error_vs_injected:.1f} vs injected alone (target <= 2)"
    )
    return result


if __name__ == "__main__":
    main()
