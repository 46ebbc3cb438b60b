"""The benchmarks' generated data, in one module they import (each benchmark runs as a script
from this folder, so it is importable as it is): image folders and their converted dataset,
text corpora per length profile, and a tokenizer trained on a sample; and how the text
benchmarks read a corpus (as the converter does, into the page cache, in (a'')'s batches)."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import random
import shutil
from typing import IO


def _generate(args: tuple[str, int, int, int]) -> int:
    from feedgpu.samples import write_sample_images

    folder, num_classes, per_class, seed = args
    return write_sample_images(
        folder, num_classes=num_classes, images_per_class=per_class, sizes=((500, 375),), seed=seed
    )


def make_folder(folder: str, images: int, workers: int, seed: int = 0) -> None:
    """N 500x375 JPEGs in 8 class folders, generated on all cores (`converted_images` skips
    it when they are already there)."""
    classes = 8
    per_class = max(1, images // classes)
    jobs = [
        (os.path.join(folder, f"part{i}"), classes, per_class // workers + 1, seed * 100 + i)
        for i in range(workers)
    ]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_generate, jobs)
    # Flatten part*/CLASS/x.jpg into CLASS/pN_x.jpg and trim to exactly `images` files.
    for i, path in enumerate(list_images(folder)):
        part, cls, name = path.split(os.sep)[-3:]
        if i >= images:
            os.remove(path)
            continue
        os.makedirs(os.path.join(folder, cls), exist_ok=True)
        os.replace(path, os.path.join(folder, cls, f"{part}_{name}"))
    for i in range(workers):
        shutil.rmtree(os.path.join(folder, f"part{i}"), ignore_errors=True)


def converted_images(root: str, images: int) -> str:
    """ROOT/images, a feedgpu dataset of `images` generated JPEGs (kept in ROOT/jpegs), made or
    brought up to date: the pipeline benchmarks' image set. Returns its path."""
    import feedgpu
    from feedgpu.convert.plan import default_workers

    src, out = os.path.join(root, "jpegs"), os.path.join(root, "images")
    if len(list_images(src)) != images:
        shutil.rmtree(src, ignore_errors=True)
        make_folder(src, images, default_workers())
    feedgpu.convert_images(src, out, quiet=True)
    return out


def list_images(folder: str) -> list[str]:
    return sorted(
        os.path.join(root, f) for root, _, fs in os.walk(folder) for f in fs if f.endswith(".jpg")
    )


# Words per document, as the (mu, sigma) of a lognormal. With the default 8k vocabulary
# (measured): ~45 tokens (titles, queries, dictionary entries), ~320, ~2,400 (articles);
# "real": ~220 in lines of sentences with punctuation, digits, quotes, some non-ASCII text.
LENGTHS = {"short": (3.2, 0.5), "medium": (5.0, 0.8), "long": (7.2, 0.5), "real": (4.4, 0.9)}
_EXTRAS = ["café", "naïve", "Zürich", "—", "…", "“quoted”", "東京", "€5"]


def _real_text(rng: random.Random, vocab: list[str], cum: list[float], words: int) -> str:
    """Lines of sentences: commas, digits, quotes, question marks; 1 in 5 has non-ASCII."""
    lines, line, sentence = [], [], []
    for word in rng.choices(vocab, cum_weights=cum, k=words):
        roll = rng.random()
        if roll < 0.03:
            word = str(rng.randint(1, 2030))
        elif roll < 0.04:
            word = f'"{word}"'
        sentence.append(word)
        if rng.random() < 0.08:
            sentence[-1] += ","
        if len(sentence) > rng.randint(6, 20):
            end = rng.choice(".....?!:")
            line.append(" ".join(sentence).capitalize() + end)
            sentence = []
            if rng.random() < 0.3:
                lines.append(" ".join(line))
                line = []
    if sentence:
        line.append(" ".join(sentence).capitalize() + ".")
    lines.append(" ".join(line))
    if rng.random() < 0.2:
        lines.insert(rng.randrange(len(lines)), rng.choice(_EXTRAS))
    return "\n".join(lines)


def make_corpus(folder: str, megabytes: float, seed: int = 0, length: str = "medium") -> list[str]:
    """JSONL files of documents with Zipf-distributed synthetic words and lognormal lengths,
    each on disk before it is closed: a corpus at rest, as a user's is. Left to the kernel's
    writeback, a 50 MB corpus was written out during a benchmark's first round, on the cores
    the contenders run on (every contender's first-round rate the lowest: benchmarks/
    RESULTS.md, "Decisions")."""
    rng = random.Random(seed)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    vocab = [
        "".join(rng.choice(letters[: rng.randint(6, 26)]) for _ in range(rng.randint(2, 11)))
        for _ in range(30000)
    ]
    # Cumulative weights made once: given weights, `choices` sums all 30,000 again for every
    # document (the same draws either way).
    cum = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(vocab))))
    os.makedirs(folder, exist_ok=True)
    docs, size, part = [], 0, 0
    target = megabytes * 1e6
    out = open(os.path.join(folder, "part-000.jsonl"), "w", encoding="utf-8")  # noqa: SIM115
    while size < target:
        count = max(5, int(rng.lognormvariate(*LENGTHS[length])))
        if length == "real":
            text = _real_text(rng, vocab, cum, count)
        else:
            text = " ".join(rng.choices(vocab, cum_weights=cum, k=count)).capitalize() + "."
        line = json.dumps({"text": text}, ensure_ascii=False) + "\n"
        out.write(line)
        docs.append(text)
        size += len(line)
        if size > (part + 1) * target / 8:
            part += 1
            _close_synced(out)
            out = open(os.path.join(folder, f"part-{part:03d}.jsonl"), "w", encoding="utf-8")  # noqa: SIM115
    _close_synced(out)
    return docs


def _close_synced(f: IO[str]) -> None:
    f.flush()
    os.fsync(f.fileno())
    f.close()


def train_tokenizer(spec: str, sample: list[str], out_dir: str) -> None:
    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer

    load_tokenizer(TokenizerSpec.parse(spec), iter(sample)).save(out_dir)


def proc_number(path: str, key: str) -> int:
    """The number after key on the first line of a /proc file starting with it ("RssAnon:" of
    /proc/PID/status, "read_bytes:" of /proc/self/io), or 0 where there is none."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cached_corpus(src: str) -> None:
    """Every file of a corpus read once, off the clock, so ours reads it from the page cache
    as every other contender holds its documents in memory. Written and fsynced, a corpus
    stays cached on most hosts; some drop cold file pages proactively (Linux DAMON's pageout
    scheme on these VMs: 33-47 MB of a 48 MB corpus read from disk again by the first
    conversion after a minute idle, less after a few seconds), which made ours alone pay a disk
    read, at random. A run that still
    reads 1 MB or more from disk says so (`disk_reads`)."""
    for root, _, files in os.walk(src):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                while f.read(1 << 20):
                    pass


def disk_reads() -> int:
    """Bytes this process has had read from storage, not the page cache (Linux's
    /proc/self/io), or 0."""
    return proc_number("/proc/self/io", "read_bytes:")
