"""What does feeding through tf.data service cost, and what does the capacity plan predict?

The same training pipeline (batches of 64 at 224x224, augmentation) is drained alone (a) locally,
(b) through a loopback tf.data service with 1 worker and (c) with 2 workers, all in this process,
alternating over rounds. On 2 cores the workers share the trainer's cores, so this shows the
service's overhead, not a speed-up: the ratios (b)/(a) and (c)/(a) are that overhead. The
capacity plan's prediction, from (b)'s rate per worker, is printed for a model needing N times
the local rate.

Usage: python benchmarks/bench_service.py [--images 1024] [--seconds 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ServiceBenchResult:
    """Median examples/s of each way of feeding, and the overhead ratios."""

    images: int
    local_img_s: float
    service_1_img_s: float
    service_2_img_s: float
    ratio_1: float
    ratio_2: float


def main(argv: Sequence[str] | None = None) -> ServiceBenchResult:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dtype", default="float32", help="batch dtype (uint8: 4x fewer bytes)")
    parser.add_argument("--data", help="keep the generated dataset here")
    args = parser.parse_args(argv)

    import feedgpu
    from feedgpu.bench.rounds import measure_pipeline
    from feedgpu.pipeline.service import start_dispatcher, start_worker
    from feedgpu.samples import make_default_dataset

    workdir = args.data or tempfile.mkdtemp(prefix="bench-service-")
    # bench-input's own sample data (re-runs with --data reuse it: conversion is a no-op)
    data = make_default_dataset(workdir, images_per_class=args.images // 4)
    spec = feedgpu.PipelineSpec.for_dataset(
        data,
        batch_size=args.batch_size,
        training=True,
        image_size=(args.image_size, args.image_size),
        dtype=args.dtype,
        repeat=True,
    )
    dispatchers = {n: start_dispatcher() for n in (1, 2)}
    workers = [start_worker(dispatchers[n].address) for n in (1, 2) for _ in range(n)]

    def rate(variant: feedgpu.PipelineSpec) -> float:
        batches = iter(feedgpu.build_pipeline(variant))
        return measure_pipeline(batches, args.seconds).examples_per_s

    rates: dict[str, list[float]] = {"local": [], "1": [], "2": []}
    for _ in range(args.rounds):
        rates["local"].append(rate(spec))
        for n in (1, 2):
            rates[str(n)].append(rate(spec.with_changes(service=dispatchers[n].address)))
    for server in [*workers, *dispatchers.values()]:
        server.stop()
    local, one, two = (statistics.median(rates[k]) for k in ("local", "1", "2"))
    result = ServiceBenchResult(args.images, local, one, two, one / local, two / local)
    print(f"rounds: {json.dumps(rates)}")
    print(f"(a) local {local:.0f} img/s; (b) service, 1 worker {one:.0f}; (c) 2 workers {two:.0f}")
    for need in (2, 4, 8):
        workers_needed = math.ceil(need * local / one)
        print(
            f"capacity plan: a model consuming {need}x the local rate "
            f"({need * local:.0f} img/s) needs {workers_needed} workers like (b)'s"
        )
    print(json.dumps(asdict(result)))
    print(f"(b)/(a) = {result.ratio_1:.2f}x, (c)/(a) = {result.ratio_2:.2f}x")
    return result


if __name__ == "__main__":
    main()
