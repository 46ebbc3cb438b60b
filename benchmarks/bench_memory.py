"""Does a conversion's memory stay flat as the dataset grows? Peak RSS at 1x and 4x the data.

Runs the real commands, `python -m feedgpu convert images` and `convert text` (--quiet --json),
each in a child process, on the benchmarks' generated data (bench_convert_images' JPEGs,
bench_convert_text's JSONL corpus) at 1x and at 4x. Every 20 ms it reads the RSS of the child
and all its descendants (the image converter's worker processes count) and keeps the peak of
their sum and of the largest one. (Not wait4's ru_maxrss, /usr/bin/time's number: it counts the
forking parent's size before exec, ~830 MB here once this process has loaded TensorFlow.)
Also the peak of their anonymous memory (RssAnon: heap, stacks, buffers; RSS adds the pages of
shared libraries touched, ~470 MB of TensorFlow's on their own). Targets: < 1 GiB (1,074 MB)
of RSS at both sizes, and 4x not above 1x by more than the sampling noise
(ratio <= 1.25).

Usage: python benchmarks/bench_memory.py [--images 3000] [--mb 50] [--vocab-size 8000] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from bench_data import proc_number

TARGET_MB = 1073.7  # 1 GiB
GROWTH_LIMIT = 1.25


@dataclass(frozen=True)
class MemoryRow:
    """One command at one size: seconds, the process tree's peak RSS and the largest
    single process's."""

    command: str
    size: str
    seconds: float
    tree_peak_mb: float
    largest_process_mb: float
    tree_anon_peak_mb: float  # without file-backed pages (TensorFlow's libraries: ~470 MB)


def _anon_kb(pid: int) -> int:
    """A process's anonymous resident memory (heap, stacks, buffers), in kB."""
    return proc_number(f"/proc/{pid}/status", "RssAnon:")


def _tree_rss_mb(root: int) -> tuple[float, float, float]:
    """RSS of a process and all its descendants, now (/proc), in MB: summed, the largest, and
    their anonymous part summed (RSS also counts the pages of shared libraries they touched)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21])
    total, largest, anon, todo = 0, 0, 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        largest = max(largest, rss.get(pid, 0))
        anon += _anon_kb(pid) if pid in rss else 0
        todo += children.get(pid, [])
    page = os.sysconf("SC_PAGE_SIZE") / 1e6
    return total * page, largest * page, anon * 1024 / 1e6


def measure(argv: list[str], command: str, size: str) -> MemoryRow:
    """Run argv to its end, sampling its process tree's RSS."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    peak = [0.0, 0.0, 0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            now = _tree_rss_mb(child.pid)
            peak[:] = [max(p, n) for p, n in zip(peak, now, strict=True)]
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status = os.waitpid(child.pid, 0)
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{' '.join(argv)} failed with exit code {child.returncode}")
    return MemoryRow(command, size, round(seconds, 2), *(round(p, 1) for p in peak))


def main(argv: Sequence[str] | None = None) -> list[MemoryRow]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=3000, help="images at 1x")
    parser.add_argument("--mb", type=float, default=50, help="text corpus MB at 1x")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--data", help="folder to keep the generated inputs in between runs")
    args = parser.parse_args(argv)
    import bench_data

    from feedgpu.convert.plan import default_workers

    tmp = tempfile.mkdtemp(prefix="bench_memory_")
    data = args.data or os.path.join(tmp, "data")
    rows = []
    try:
        inputs = {}
        for scale in (1, 4):
            folder = os.path.join(data, f"images-{scale}x")
            n = args.images * scale
            if len(bench_data.list_images(folder)) != n:
                shutil.rmtree(folder, ignore_errors=True)
                print(f"generating {n} images in {folder} ...", file=sys.stderr)
                bench_data.make_folder(folder, n, default_workers(), seed=scale)
            corpus = os.path.join(data, f"text-{scale}x")
            if not os.path.isdir(corpus):
                print(f"generating {args.mb * scale:g} MB of text in {corpus} ...", file=sys.stderr)
                bench_data.make_corpus(corpus, args.mb * scale, seed=scale)
            inputs[scale] = (folder, corpus)
        vocab = os.path.join(data, "vocab.txt")
        if not os.path.exists(vocab):
            sample = bench_data.make_corpus(os.path.join(tmp, "sample"), min(2, args.mb))
            # In a child: this process stays small (its children are what is measured).
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                pool.apply(
                    bench_data.train_tokenizer,
                    (f"train:wordpiece:{args.vocab_size}", sample, data),
                )
        base = [sys.executable, "-m", "feedgpu", "convert"]
        for scale, (folder, corpus) in inputs.items():
            out = os.path.join(tmp, f"out-{scale}")
            shutil.rmtree(out, ignore_errors=True)
            rows.append(
                measure([*base, "images", folder, out, "--quiet", "--json"], "images", f"{scale}x")
            )
            shutil.rmtree(out, ignore_errors=True)
            text = [*base, "text", corpus, out, "--tokenizer", vocab, "--quiet", "--json"]
            rows.append(measure(text, "text", f"{scale}x"))
            shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"{'command':<8}{'size':>5}{'seconds':>9}{'tree peak MB':>14}{'largest process MB':>20}"
        f"{'anonymous MB':>14}"
    )
    for row in rows:
        print(
            f"{row.command:<8}{row.size:>5}{row.seconds:>9.1f}{row.tree_peak_mb:>14.0f}"
            f"{row.largest_process_mb:>20.0f}{row.tree_anon_peak_mb:>14.0f}"
        )
    for row in rows:
        print(json.dumps(asdict(row)))
    verdicts = []
    for command in ("images", "text"):
        one, four = (r for r in rows if r.command == command)
        growth = four.tree_peak_mb / one.tree_peak_mb
        flat = growth <= GROWTH_LIMIT and four.tree_peak_mb < TARGET_MB
        verdicts.append(
            f"{command}: 4x/1x = {growth:.2f} (<= {GROWTH_LIMIT}), peak {four.tree_peak_mb:.0f} "
            f"MB (< {TARGET_MB}) {'met' if flat else 'NOT MET'} (anonymous "
            f"{four.tree_anon_peak_mb:.0f} MB)"
        )
    print("   ".join(verdicts))
    return rows


if __name__ == "__main__":
    main()
