"""A/B of a text dataset's record layout in the pipeline: one dataset's M tokens/s through
`build_pipeline` (`PipelineSpec.for_dataset` defaults, batch 128, training): the first epoch of
a fresh pipeline (cold), steady with the memory cache (cached, after a whole epoch), and every
epoch from disk (uncached, cache=None). Run it alternately on the same corpus converted with
`--docs-per-record 1` and with blocks (benchmarks/RESULTS.md, "Issue 28").

Usage: python benchmarks/ab_text_layout.py DATASET [BATCH]
"""

from __future__ import annotations

import os
import sys
import time


def main(data: str, batch: int = 128) -> str:
    import feedgpu

    spec = feedgpu.PipelineSpec.for_dataset(data, batch_size=batch, training=True)
    spec = spec.with_changes(repeat=True)
    tokens = feedgpu.read_manifest(data).text.tokens

    def count(batch) -> int:
        return int(batch["attention_mask"].numpy().sum())

    def steady(ds, warm: int) -> float:
        it = iter(ds)
        seen = 0
        while seen < warm:
            seen += count(next(it))
        got, start = 0, time.perf_counter()
        while got < tokens:
            got += count(next(it))
        return got / (time.perf_counter() - start)

    cold = feedgpu.build_pipeline(spec.with_changes(repeat=False)).map(lambda x, *_: x)
    start = time.perf_counter()
    rates = {"cold": sum(count(b) for b in cold) / (time.perf_counter() - start)}
    cached = feedgpu.build_pipeline(spec).map(lambda x, *_: x)
    rates["cached"] = steady(cached, tokens)
    disk = feedgpu.build_pipeline(spec.with_changes(cache=None)).map(lambda x, *_: x)
    rates["uncached"] = steady(disk, tokens // 10)
    line = " ".join(f"{k} {v / 1e6:.2f}" for k, v in rates.items())
    print(f"{os.path.basename(data.rstrip('/'))} {line} M tok/s")
    return line


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:3]))
