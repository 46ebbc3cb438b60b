"""Does each conversion speed trick still earn its lines? Each switched off vs on, alone.

For every trick, conversions alternate off, on, off, on... (--runs pairs) on the same data, in
one process per profile, and the median wall times give on/off (above 1: the trick helps).
Profiles: images (the image benchmark's 500x375 JPEGs) and JSONL text of ~40 and ~300 tokens
per document (per-document costs weigh most on short ones). A trick is switched off by
replacing, for that run only, the function that implements it with the plain equivalent:
  frozen_heap   no gc.freeze / raised gc threshold around the conversion
  crc_heads     every record's length header CRC computed, none kept
  orjson        JSON lines parsed by the standard library
Also prints how much the page cache grew during each conversion (MB): O_DIRECT shard writing
was measured this way before it was removed (it was no faster, and its one benefit, page cache
left untouched, also leaves training right after a conversion reading from disk).

Usage: python benchmarks/bench_tricks.py [--runs 8] [--images 1500] [--mb 20] [--tricks a,b]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass

import bench_data

IMAGE_TRICKS = ("frozen_heap", "crc_heads")
TEXT_TRICKS = ("frozen_heap", "crc_heads", "orjson")


@dataclass(frozen=True)
class TrickRow:
    """One trick on one profile: median seconds with it off and on, and their ratio."""

    profile: str
    trick: str
    off_s: float
    on_s: float
    runs: int
    cache_growth_off_mb: float | None = None
    cache_growth_on_mb: float | None = None

    @property
    def gain(self) -> float:
        """Speed with the trick over speed without (above 1: it helps)."""
        return self.off_s / self.on_s


def _cached_mb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Cached:"):
                return int(line.split()[1]) / 1024
    return 0.0


@contextlib.contextmanager
def switched_off(trick: str) -> Iterator[None]:
    """The trick replaced by its plain equivalent until the block ends."""
    from feedgpu.convert import gc_freeze as heap
    from feedgpu.converters.text import sources as text_sources
    from feedgpu.format import records

    saved: list[tuple[object, str, object]] = []

    def patch(owner: object, name: str, value: object) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    if trick == "frozen_heap":
        inert = types.SimpleNamespace(
            freeze=lambda: None,
            unfreeze=lambda: None,
            get_freeze_count=lambda: 1,  # "the caller froze": heap_frozen then does nothing
            get_threshold=gc.get_threshold,
            set_threshold=lambda *a: None,
        )
        patch(heap, "gc", inert)
    elif trick == "crc_heads":

        class Forgetful(dict):  # type: ignore[type-arg]
            def get(self, key: object, default: object = None) -> object:
                return default

        patch(records, "_HEADS", Forgetful())
    elif trick == "orjson":
        plain_json = types.SimpleNamespace(loads=json.loads, JSONDecodeError=json.JSONDecodeError)
        patch(text_sources, "orjson", plain_json)
    else:
        raise ValueError(trick)
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def alternate(
    profile: str, trick: str, convert: Callable[[str], None], runs: int, out: str
) -> TrickRow:
    """off, on, off, on...; a first untimed run of each warms caches and lazy set-up."""
    times: dict[bool, list[float]] = {False: [], True: []}
    growth: dict[bool, list[float]] = {False: [], True: []}
    for i in range(2 * runs + 2):
        on = bool(i % 2)
        shutil.rmtree(out, ignore_errors=True)
        cached = _cached_mb()
        start = time.perf_counter()
        with contextlib.nullcontext() if on else switched_off(trick):
            convert(out)
        seconds = time.perf_counter() - start
        if i >= 2:
            times[on].append(seconds)
            growth[on].append(_cached_mb() - cached)
    row = TrickRow(
        profile,
        trick,
        round(statistics.median(times[False]), 4),
        round(statistics.median(times[True]), 4),
        runs,
        round(statistics.median(growth[False]), 1),
        round(statistics.median(growth[True]), 1),
    )
    print(f"  {profile:<7} {trick:<12} off {row.off_s:.3f} s  on {row.on_s:.3f} s  "
          f"gain {row.gain:.3f}x", file=sys.stderr)  # fmt: skip
    return row


def image_rows(args: argparse.Namespace, tmp: str) -> list[dict[str, object]]:
    """Runs without TensorFlow loaded, as the CLI's image conversion does (workers fork)."""

    from feedgpu import ImageOptions, convert_images

    src = os.path.join(tmp, "images")
    bench_data.make_folder(src, args.images, 2)

    def convert(out: str) -> None:
        convert_images(src, out, ImageOptions(), quiet=True)

    out = os.path.join(tmp, "out-images")
    tricks = [t for t in IMAGE_TRICKS if t in args.tricks.split(",")]
    return [asdict(alternate("images", t, convert, args.runs, out)) for t in tricks]


def text_rows(args: argparse.Namespace, tmp: str, length: str) -> list[dict[str, object]]:

    from feedgpu import TextOptions, convert_text

    src = os.path.join(tmp, f"corpus-{length}")
    bench_data.make_corpus(src, args.mb, length=length)
    vocab = os.path.join(tmp, "vocab.txt")

    def convert(out: str) -> None:
        convert_text(src, out, TextOptions(tokenizer=vocab), quiet=True)

    out = os.path.join(tmp, f"out-{length}")
    name = {"short": "text40", "medium": "text300"}[length]
    tricks = [t for t in TEXT_TRICKS if t in args.tricks.split(",")]
    return [asdict(alternate(name, t, convert, args.runs, out)) for t in tricks]


def _in_child(target: Callable[..., object], *args: object) -> object:
    """A fresh process per profile: image runs without TensorFlow, text apart from them."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:  # not daemonic: it may fork
        return pool.submit(target, *args).result()


def main(argv: Sequence[str] | None = None) -> list[TrickRow]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="alternating pairs per trick")
    parser.add_argument("--images", type=int, default=1500)
    parser.add_argument("--mb", type=float, default=20, help="text corpus size per profile")
    parser.add_argument("--profiles", default="images,short,medium")
    parser.add_argument("--tricks", default=",".join(TEXT_TRICKS), help="which to measure")
    args = parser.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="bench_tricks_")
    rows: list[dict[str, object]] = []
    try:
        profiles = args.profiles.split(",")
        if "images" in profiles:
            rows += _in_child(image_rows, args, tmp)  # type: ignore[operator]
        texts = [p for p in profiles if p != "images"]
        if texts:
            sample = bench_data.make_corpus(os.path.join(tmp, "sample"), 2)
            _in_child(bench_data.train_tokenizer, "train:wordpiece:8000", sample, tmp)
            for length in texts:
                rows += _in_child(text_rows, args, tmp, length)  # type: ignore[operator]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = [TrickRow(**r) for r in rows]  # type: ignore[arg-type]
    print(f"{'profile':<9}{'trick':<13}{'off s':>8}{'on s':>8}{'gain':>8}  page cache MB off/on")
    for r in result:
        cache = (
            f"  {r.cache_growth_off_mb:.0f} / {r.cache_growth_on_mb:.0f}"
            if r.cache_growth_off_mb is not None
            else ""
        )
        print(f"{r.profile:<9}{r.trick:<13}{r.off_s:>8.3f}{r.on_s:>8.3f}{r.gain:>7.3f}x{cache}")
    print(json.dumps([{**asdict(r), "gain": round(r.gain, 4)} for r in result]))
    best = max(result, key=lambda r: r.gain)
    print(f"largest gain: {best.trick} on {best.profile} {best.gain:.3f}x (keep needs >= 1.03x)")
    return result


if __name__ == "__main__":
    main()
