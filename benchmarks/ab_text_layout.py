"""A/B of a text dataset's record layout in the pipeline: one dataset's M tokens/s through
`build_pipeline` (`PipelineSpec.for_dataset` defaults, batch 128, training): the first epoch of
a fresh pipeline (cold), steady with the memory cache (cached, after a whole epoch), and every
epoch from disk (uncached, cache=None). Run it alternately on the same corpus converted with
`--docs-per-record 1` and with blocks (benchmarks/RESULTS.md, "Decisions").

Usage: python benchmarks/ab_text_layout.py DATASET [BATCH]
"""

from __future__ import annotations

import os
import sys

from bench_pipeline import ours_text_rates


def main(data: str, batch: int = 128) -> str:
    import feedgpu

    spec = feedgpu.PipelineSpec.for_dataset(data, batch_size=batch, training=True)
    tokens = feedgpu.read_manifest(data).text.tokens
    measured = ours_text_rates(spec, lambda b: int(b["attention_mask"].numpy().sum()), tokens)
    names = {"ours_cold": "cold", "ours": "cached", "ours_disk": "uncached"}
    rates = {names[k]: v for k, v in measured.items()}
    line = " ".join(f"{k} {v / 1e6:.2f}" for k, v in rates.items())
    print(f"{os.path.basename(data.rstrip('/'))} {line} M tok/s")
    return line


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:3]))
