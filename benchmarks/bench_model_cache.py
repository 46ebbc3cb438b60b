"""What do kept tokenizer models save a text conversion? `feedgpu convert text` in a fresh
process each run, as a user runs it, with tensorflow-text's models built (an empty cache
folder: a vocabulary's first conversion) against kept (the folder a previous run filled).

Alternates built and kept, --rounds times, on one generated corpus (`bench_data.make_corpus`,
real-like documents) and one vocabulary (a vocab.txt given, else the 8k one
bench_convert_text learns), without feedgpu's compiled steps (FEEDGPU_NO_NATIVE=1: a package
installed without a C compiler), the one case where tensorflow-text tokenizes: the compiled
step needs no models, and since its table of characters beyond ASCII (`char_table`) it
leaves none of this corpus's texts to them. Prints each run's conversion step (the
CLI's `stages_s.conversion`) and the whole process's wall time, their medians, and kept/built
as the median of each round's own ratio (this shared host's speed drifts between rounds by
more than the gap). Measured before the cache (77fe774, RESULTS.md "Issue 29, fourth
session"): a conversion paid about 0.5 s building the models of an 8k or a 30k vocabulary.

Usage: python benchmarks/bench_model_cache.py [--mb 50] [--rounds 4] [--tokenizer vocab.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_data import make_corpus, train_tokenizer

from feedgpu.converters.text.native import NO_NATIVE_ENV


def convert(src: str, out: str, vocab: str, cache: str) -> tuple[float, float]:
    """One CLI conversion in a fresh process: its conversion step and its whole wall time."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "feedgpu", "convert", "text", src, out]
    command += ["--tokenizer", vocab, "--quiet", "--json"]
    start = time.perf_counter()
    done = subprocess.run(
        command,
        env={**os.environ, "FEEDGPU_CACHE_DIR": cache, NO_NATIVE_ENV: "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - start
    return float(json.loads(done.stdout)["stages_s"]["conversion"]), wall


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=50)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--tokenizer", metavar="VOCAB", help="a vocab.txt instead of a trained one")
    args = parser.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="bench_model_cache_")
    try:
        src = os.path.join(tmp, "corpus")
        docs = make_corpus(src, args.mb, length="real")
        vocab = args.tokenizer or os.path.join(tmp, "vocab.txt")
        if not args.tokenizer:
            train_tokenizer("train:wordpiece:8000", docs[: max(1, len(docs) // 10)], tmp)
        kept_cache = os.path.join(tmp, "kept")
        convert(src, os.path.join(tmp, "out"), vocab, kept_cache)  # fills it
        kept = [n for _, _, names in os.walk(kept_cache) for n in names if n.endswith(".fb")]
        if len(kept) != 2:
            raise SystemExit(f"expected the 2 models kept in {kept_cache}, found {kept}")
        runs: dict[str, list[tuple[float, float]]] = {"built": [], "kept": []}
        for r in range(args.rounds):
            built_cache = os.path.join(tmp, f"built-{r}")  # empty: the models are built
            for name, cache in (("built", built_cache), ("kept", kept_cache)):
                runs[name].append(convert(src, os.path.join(tmp, "out"), vocab, cache))
                step, wall = runs[name][-1]
                print(f"round {r + 1} {name}: conversion {step:.3f} s, process {wall:.2f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    built_step = statistics.median(s for s, _ in runs["built"])
    kept_step = statistics.median(s for s, _ in runs["kept"])
    ratio = statistics.median(k[0] / b[0] for b, k in zip(runs["built"], runs["kept"], strict=True))
    process = statistics.median(
        k[1] / b[1] for b, k in zip(runs["built"], runs["kept"], strict=True)
    )
    print(
        f"conversion step: built {built_step:.3f} s, kept {kept_step:.3f} s; kept/built "
        f"{ratio:.2f}x (median of rounds); whole process kept/built {process:.2f}x"
    )
    return {
        "built_s": built_step,
        "kept_s": kept_step,
        "kept_vs_built": ratio,
        "process_kept_vs_built": process,
    }


if __name__ == "__main__":
    main()
