"""How fast is `feedgpu convert images` against the decode ceiling and a classic converter?

Alternates, in one process on the same generated folder of photo-sized JPEGs:
  (a) ceiling: Pillow reduced-size (1/8) decode of every file on all cores, nothing written;
  (b) classic: one process, full decode, `tf.train.Example` + `tf.io.TFRecordWriter`, in the
      style of TensorFlow's old build_image_data.py;
  (c) ours: `convert_images` with all cores, to a fresh folder each round.
Prints images/s for each and the ratios ours/(a) and ours/(b) last. Targets: >= 0.8x and >= 3x.
Also prints the converter workers' peak RSS for a quarter of the data and for all of it: it must
not grow with dataset size.

Usage: python benchmarks/bench_convert_images.py [--images 3000] [--rounds 3] [--data DIR]
"""

from __future__ import annotations

import argparse
import compileall
import io
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from bench_data import list_images, make_folder

import feedgpu


@dataclass(frozen=True)
class ConvertBenchResult:
    """Median images/s of each contender and the ratios the targets are stated in."""

    images: int
    workers: int
    rounds: int
    ceiling_img_s: float
    classic_img_s: float
    ours_img_s: float
    worker_peak_rss_mb_quarter: float
    worker_peak_rss_mb_full: float

    @property
    def ours_vs_ceiling(self) -> float:
        return self.ours_img_s / self.ceiling_img_s

    @property
    def ours_vs_classic(self) -> float:
        return self.ours_img_s / self.classic_img_s


def _decode_reduced(path: str) -> int:
    from PIL import Image

    with open(path, "rb") as f:
        img = Image.open(io.BytesIO(f.read()))
        img.draft(img.mode, (img.width // 8, img.height // 8))
        img.load()
    return img.width


def run_ceiling(pool: multiprocessing.pool.Pool, files: list[str]) -> float:
    start = time.perf_counter()
    pool.map(_decode_reduced, files, chunksize=64)
    return len(files) / (time.perf_counter() - start)


def run_classic(files: list[str], out_dir: str) -> float:
    """One process: read, full decode, Example, TFRecordWriter; as build_image_data.py did."""
    import tensorflow as tf
    from PIL import Image

    classes = sorted({os.path.basename(os.path.dirname(f)) for f in files})
    start = time.perf_counter()
    with tf.io.TFRecordWriter(os.path.join(out_dir, "classic.tfrecord")) as writer:
        for path in files:
            with open(path, "rb") as f:
                data = f.read()
            img = Image.open(io.BytesIO(data))
            img.load()
            label = classes.index(os.path.basename(os.path.dirname(path)))
            feature = {
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[img.height])),
                "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[img.width])),
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    return len(files) / (time.perf_counter() - start)


def run_ours(src: str, out_dir: str, workers: int) -> float:
    """The command a user runs, in its own process, timed from launch to exit."""
    shutil.rmtree(out_dir, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "feedgpu",
        "convert",
        "images",
        src,
        out_dir,
        "--json",
        "--workers",
        str(workers),
    ]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - start
    return int(json.loads(done.stdout)["num_examples"]) / seconds


def _children_peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main(argv: Sequence[str] | None = None) -> ConvertBenchResult:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="default: all cores")
    parser.add_argument("--data", help="folder to keep the generated images in between runs")
    args = parser.parse_args(argv)
    from feedgpu.convert.plan import default_workers

    workers = args.workers or default_workers()
    # An installed feedgpu starts from bytecode. A checkout run with PYTHONDONTWRITEBYTECODE
    # (set on this machine) would compile its modules again at every launch (~15 ms here).
    compileall.compile_dir(os.path.dirname(os.path.realpath(feedgpu.__file__)), quiet=1)
    tmp = tempfile.mkdtemp(prefix="bench_convert_")
    data = args.data or os.path.join(tmp, "data")
    try:
        full, quarter = os.path.join(data, "full"), os.path.join(data, "quarter")
        for folder, n, seed in ((full, args.images, 0), (quarter, max(8, args.images // 4), 1)):
            if len(list_images(folder)) != n:
                shutil.rmtree(folder, ignore_errors=True)
                print(f"generating {n} images in {folder} ...", file=sys.stderr)
                make_folder(folder, n, workers, seed)
        files = list_images(full)
        # Peak RSS first, before any other child process exists: quarter then full.
        run_ours(quarter, os.path.join(tmp, "rss_quarter"), workers)
        rss_quarter = _children_peak_rss_mb()
        run_ours(full, os.path.join(tmp, "rss_full"), workers)
        rss_full = _children_peak_rss_mb()
        import tensorflow  # noqa: F401 - imported before timing: the classic pays it once too

        rates: dict[str, list[float]] = {"ceiling": [], "classic": [], "ours": []}
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            pool.map(_decode_reduced, files[: workers * 4])  # warm the pool's imports
            for r in range(args.rounds):
                rates["ceiling"].append(run_ceiling(pool, files))
                rates["classic"].append(run_classic(files, tmp))
                rates["ours"].append(run_ours(full, os.path.join(tmp, "ours"), workers))
                print(
                    f"round {r + 1}: "
                    + ", ".join(f"{k} {v[-1]:.0f} img/s" for k, v in rates.items()),
                    file=sys.stderr,
                )
        result = ConvertBenchResult(
            images=len(files),
            workers=workers,
            rounds=args.rounds,
            ceiling_img_s=round(statistics.median(rates["ceiling"]), 1),
            classic_img_s=round(statistics.median(rates["classic"]), 1),
            ours_img_s=round(statistics.median(rates["ours"]), 1),
            worker_peak_rss_mb_quarter=round(rss_quarter, 1),
            worker_peak_rss_mb_full=round(rss_full, 1),
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'contender':<34}{'img/s':>10}")
    print(f"{'(a) ceiling: 1/8 decode, all cores':<34}{result.ceiling_img_s:>10.0f}")
    print(f"{'(b) classic single-process':<34}{result.classic_img_s:>10.0f}")
    print(f"{'(c) feedgpu convert images':<34}{result.ours_img_s:>10.0f}")
    print(
        f"worker peak RSS: {result.worker_peak_rss_mb_quarter:.0f} MB "
        f"for {args.images // 4} images, "
        f"{result.worker_peak_rss_mb_full:.0f} MB for {result.images}"
    )
    print(
        json.dumps(
            {
                **asdict(result),
                "ours_vs_ceiling": round(result.ours_vs_ceiling, 3),
                "ours_vs_classic": round(result.ours_vs_classic, 3),
            }
        )
    )
    print(
        f"ours/(a) = {result.ours_vs_ceiling:.2f}x (target >= 0.8)   "
        f"ours/(b) = {result.ours_vs_classic:.2f}x (target >= 3)"
    )
    return result


if __name__ == "__main__":
    main()
