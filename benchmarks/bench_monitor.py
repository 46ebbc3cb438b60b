"""Does FeedMonitor measure, inside a real `model.fit`, the input wait that is there, and does it
cost anything outside its windows?

A known stall is injected into feedgpu's pipeline (a C++ sleep per batch after the prefetch,
`StageChanges(delay_s=(("stall", d),))`), sized to a grid of shares of the step time (0%, 10%,
30%, 60%), and `model.fit` runs the built-in small CNN with FeedMonitor. As in bench_verdict,
the 0% row is the baseline: its compute per step sizes the stalls, and its own input wait w0
per step (the real pipeline's) gives each row's expected share, (d + w0) per step over the
row's measured step time. Then the overhead: the same fit with and without the monitor, in
alternating runs, timing only the steps after the monitor's window.
Targets: worst error <= 3 points, every verdict right, overhead outside the window < 1%.

Usage: python benchmarks/bench_monitor.py [--images 512] [--shares 0,10,30,60] [--pairs 3]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class MonitorRow:
    target_share: float
    delay_ms: float
    expected_share: float
    measured_share: float
    expected_verdict: str
    measured_verdict: str

    @property
    def error(self) -> float:
        return self.measured_share - self.expected_share


@dataclass(frozen=True)
class MonitorBenchResult:
    rows: tuple[MonitorRow, ...]
    worst_error: float
    verdicts_right: int
    overhead: float  # (with monitor) / (without) - 1, step time after the window, medians


def main(argv: Sequence[str] | None = None) -> MonitorBenchResult:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--shares", default="0,10,30,60", help="percent of step time")
    parser.add_argument("--steps", type=int, default=60, help="steps per fit")
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument(
        "--pairs", type=int, default=3, help="overhead: fits with/without (0: not measured)"
    )
    parser.add_argument("--data", help="keep the generated dataset here")
    parser.add_argument("--xla", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(argv)

    import keras

    import feedgpu
    from feedgpu.bench.device import resolve_devices
    from feedgpu.bench.models import build_workload
    from feedgpu.bench.report import verdict_for
    from feedgpu.pipeline.measure_hooks import StageChanges
    from feedgpu.samples import make_default_dataset

    workdir = args.data or tempfile.mkdtemp(prefix="bench-monitor-")
    data = make_default_dataset(workdir, images_per_class=args.images // 4)
    spec = feedgpu.PipelineSpec.for_dataset(
        data,
        "train",
        batch_size=args.batch_size,
        training=True,
        image_size=(args.image_size, args.image_size),
        cache="memory",
        repeat=True,
        drop_remainder=True,
    )
    setup = resolve_devices(feedgpu.DeviceConfig(xla=args.xla))
    num_classes = len(feedgpu.read_manifest(data).label_names)

    def model() -> Any:
        work = build_workload(
            "image", "small", setup, num_classes=num_classes, image_size=spec.image_size
        )
        m = work.model
        m.compile(
            keras.optimizers.SGD(0.01, momentum=0.9),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=setup.xla,
        )
        return m

    def fit(delay: float, monitor: Any, timer: Any = None) -> None:
        stages = StageChanges(delay_s=(("stall", delay),)) if delay else StageChanges()
        callbacks = [c for c in (monitor, timer) if c is not None]
        ds = feedgpu.build_pipeline(spec, None, stages)
        model().fit(ds, steps_per_epoch=args.steps, epochs=1, verbose=0, callbacks=callbacks)

    start = 10  # after the first compiled steps and buffers
    shares = [float(s) / 100 for s in args.shares.split(",")]
    if shares[0] != 0:
        shares.insert(0, 0.0)
    rows: list[MonitorRow] = []
    wait0 = compute = 0.0
    for target in shares:
        delay = target / (1 - target) * compute if target else 0.0
        monitor = feedgpu.FeedMonitor(window=args.window, start=start, verbose=0)
        fit(delay, monitor)
        window = monitor.windows[-1]
        step = window.seconds / window.steps
        if target == 0:
            wait0 = window.input_share * step
            compute = step - wait0
        expected = (delay + wait0) / step
        verdicts = (verdict_for(expected), window.verdict)
        rows.append(MonitorRow(target, 1000 * delay, expected, window.input_share, *verdicts))

    class Timer(keras.callbacks.Callback):
        """Wall time from the end of step `after` to the end of the fit."""

        async_safe = True

        def __init__(self, after: int) -> None:
            super().__init__()
            self.after, self.t0, self.seconds = after, 0.0, 0.0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch == self.after:
                self.t0 = time.perf_counter()

        def on_train_end(self, logs: Any = None) -> None:
            self.seconds = time.perf_counter() - self.t0

    after = start + args.window + 2
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.pairs):
        for with_monitor in (False, True):
            timer = Timer(after)
            monitor = feedgpu.FeedMonitor(window=args.window, start=start, verbose=0)
            fit(0.0, monitor if with_monitor else None, timer)
            times[with_monitor].append(timer.seconds)
    overhead = math.nan  # --pairs 0: not measured
    if args.pairs:
        overhead = statistics.median(times[True]) / statistics.median(times[False]) - 1
    if not args.data:
        shutil.rmtree(workdir, ignore_errors=True)
    result = MonitorBenchResult(
        rows=tuple(rows),
        worst_error=max(abs(r.error) for r in rows),
        verdicts_right=sum(r.expected_verdict == r.measured_verdict for r in rows),
        overhead=overhead,
    )
    print(
        f"model.fit, cnn-small {args.image_size}px, batch {args.batch_size}, "
        f"steps_per_epoch {args.steps}, window {args.window} steps from step {start}; "
        f"compute {1000 * compute:.1f} ms/step, real input wait {1000 * wait0:.2f} ms/step"
    )
    print(f"{'target':>7} {'delay ms':>9} {'expected':>9} {'measured':>9} {'error':>7}  verdict")
    for r in rows:
        mark = "ok" if r.expected_verdict == r.measured_verdict else "WRONG"
        print(
            f"{r.target_share:>7.0%} {r.delay_ms:>9.2f} {r.expected_share:>9.1%} "
            f"{r.measured_share:>9.1%} {100 * r.error:>+7.1f}  "
            f"{r.expected_verdict} / {r.measured_verdict} {mark}"
        )
    print(
        "overhead outside the window (s for the steps after it, without / with): "
        + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(times[False], times[True], strict=True))
    )
    print(json.dumps({**asdict(result), "rows": [asdict(r) for r in rows]}))
    print(
        f"verdicts right {result.verdicts_right}/{len(rows)}; worst error "
        f"{100 * result.worst_error:.1f} points (target <= 3); overhead outside the window "
        f"{100 * overhead:+.1f}% (target < 1%)"
    )
    return result


if __name__ == "__main__":
    main()
