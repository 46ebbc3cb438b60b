"""How fast is `feedgpu convert text`, per further MiB, against a plain script and against
tokenizing in TensorFlow?

For each length profile (--lengths: short ~45 tokens a document, medium ~320, long ~2,400,
real ~220 in lines of punctuated sentences, markup: real text with brackets, tags, braces,
hashes and pipes in at least a quarter of its documents, and markup-free: the same corpus
with those characters removed) and for --pack 1024 (the real profile packed), one corpus of
--large-mb whose first --small-mb is a corpus of its own:

  (c) ours: `convert_text` on both, alternating, --rounds each; its rate is the marginal one,
      the tokens between the two over the seconds between them, so start-up and every other
      fixed cost fall out (TensorFlow imported before, as the CLI does);
  (b) plain: what a straightforward script does, HF `encode_batch` in a loop, one
      `tf.train.Example` a document, one `TFRecordWriter`;
  (a') tensorflow-text's FastBertTokenizer (the best a user could run in TensorFlow) called
      from a thread a core on batches of 512 texts, nothing written.

(b) and (a') have no fixed cost worth the name (their tokenizers built before the clock), so
their rates are measured on the first --ref-mb of the corpus, their documents in memory.
Ours reads its corpus from the page cache (`cached_corpus`). Tokens are the documents' own,
special tokens not counted, for every contender. Floors: ours at least 10x (b) and 1.5x (a')
at every row, and the markup profile's rate within 15% of markup-free's.

Usage: python benchmarks/bench_convert_text.py [--small-mb 120] [--large-mb 240] [--rounds 3]
       [--lengths short,medium,long,real,markup,markup-free,pack] [--ref-mb 24]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

from bench_data import cached_corpus, disk_reads, make_corpus, train_tokenizer
from text_reference import fast_bert

PROFILES = ("short", "medium", "long", "real", "markup", "markup-free", "pack")
PLAIN_FLOOR, THREADS_FLOOR, MARKUP_FLOOR = 10.0, 1.5, 0.85


@dataclass
class Row:
    profile: str
    documents: int
    tokens: int  # the large corpus's
    small_s: float  # ours' medians
    large_s: float
    ours_tok_s: float  # marginal
    plain_tok_s: float
    threads_tok_s: float
    ours_vs_plain: float
    ours_vs_threads: float


def run_ours(src: str, out_dir: str, vocab: str, pack: int | None) -> float:
    """Seconds `convert_text` takes, its corpus in the page cache."""
    from feedgpu.converters.text.convert import TextOptions, convert_text

    shutil.rmtree(out_dir, ignore_errors=True)
    cached_corpus(src)
    before = disk_reads()
    start = time.perf_counter()
    convert_text(src, out_dir, TextOptions(tokenizer=vocab, pack=pack), quiet=True)
    seconds = time.perf_counter() - start
    if disk_reads() - before >= 1 << 20:
        print(f"ours: {(disk_reads() - before) >> 20} MB read from disk", file=sys.stderr)
    return seconds


def run_plain(tokenizer, docs: list[str], out_dir: str) -> float:
    """(b)'s tokens/s."""
    import tensorflow as tf

    tokens = 0
    start = time.perf_counter()
    with tf.io.TFRecordWriter(os.path.join(out_dir, "plain.tfrecord")) as writer:
        for i in range(0, len(docs), 1000):
            for enc in tokenizer.hf.encode_batch(docs[i : i + 1000], add_special_tokens=False):
                tokens += len(enc.ids)
                ids = tf.train.Feature(int64_list=tf.train.Int64List(value=enc.ids))
                features = tf.train.Features(feature={"input_ids": ids})
                writer.write(tf.train.Example(features=features).SerializeToString())
    return tokens / (time.perf_counter() - start)


def run_threads(tokenizer, docs: list[str]) -> float:
    """(a')'s tokens/s: the graph traced before the clock."""
    from concurrent.futures import ThreadPoolExecutor

    import tensorflow as tf

    from feedgpu.convert.plan import default_workers

    fast = fast_bert(tokenizer)
    graph = tf.function(
        lambda t: tf.reduce_sum(fast.tokenize(t).row_lengths()),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    graph(tf.constant(docs[:8]))
    start = time.perf_counter()
    with ThreadPoolExecutor(default_workers()) as pool:
        counts = pool.map(
            lambda i: int(graph(tf.constant(docs[i : i + 512]))), range(0, len(docs), 512)
        )
        tokens = sum(counts)
    return tokens / (time.perf_counter() - start)


MARKUP = ("[1913 Webster]", "[1]", "<b>", "</b>", "{{cite}}", "#tag", " | ", "x[i] = y[j]")
MARKUP_CHARS = "[]<>{}#|"


def _write(folder: str, docs: list[str]) -> None:
    """Documents as JSONL files of about equal size (one a tenth), synced."""
    os.makedirs(folder, exist_ok=True)
    per = -(-len(docs) // 10)
    for part in range(0, len(docs), per):
        with open(os.path.join(folder, f"part-{part // per:03d}.jsonl"), "w") as f:
            chunk = docs[part : part + per]
            f.writelines(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in chunk)
            f.flush()
            os.fsync(f.fileno())


_MADE: dict[str, list[str]] = {}  # a length profile's documents, made once a run


def corpora(
    profile: str, root: str, small_mb: float, large_mb: float
) -> tuple[str, str, list[str], int]:
    """The profile's small and large corpus folders (the small one the large one's start,
    its first `cut` documents), and the large one's documents; markup, markup-free and pack
    are the real profile's documents."""
    import random

    length = {"markup": "real", "markup-free": "real", "pack": "real"}.get(profile, profile)
    large, small = os.path.join(root, profile, "large"), os.path.join(root, profile, "small")
    if length not in _MADE:
        _MADE[length] = make_corpus(os.path.join(root, "made"), large_mb, length=length)
        shutil.rmtree(os.path.join(root, "made"))
    docs = list(_MADE[length])
    if profile.startswith("markup"):
        rng = random.Random(7)
        for i in range(len(docs)):
            if rng.random() < 0.3:  # a quarter and more hold markup
                words = docs[i].split(" ")
                for _ in range(rng.randint(1, 3)):
                    words.insert(rng.randrange(len(words) + 1), rng.choice(MARKUP))
                docs[i] = " ".join(words)
        if profile == "markup-free":
            docs = [d.translate(str.maketrans("", "", MARKUP_CHARS)) for d in docs]
    _write(large, docs)
    cut, size = 0, 0
    while size < small_mb * 1e6 and cut < len(docs):
        size += len(docs[cut].encode()) + 12
        cut += 1
    _write(small, docs[:cut])
    return small, large, docs, cut


def measure(args: argparse.Namespace, profile: str, root: str, vocab: str, tok) -> Row:
    small, large, docs, cut = corpora(profile, root, args.small_mb, args.large_mb)
    pack = 1024 if profile == "pack" else None
    out = os.path.join(root, "out")
    times: dict[str, list[float]] = {"small": [], "large": []}
    for _ in range(args.rounds):
        for name, src in (("small", small), ("large", large)):
            times[name].append(run_ours(src, out, vocab, pack))
    counts = _tokens(tok, docs)  # each document's, counted once for both corpora
    tokens = {"small": sum(counts[:cut]), "large": sum(counts)}
    small_s, large_s = (statistics.median(times[k]) for k in ("small", "large"))
    if large_s <= small_s:  # no marginal rate to be had: the corpora are too close in size
        sys.exit(f"{profile}: the large corpus converted no slower than the small one")
    ours = (tokens["large"] - tokens["small"]) / (large_s - small_s)
    ref, size = [], 0
    for d in docs:
        if size > args.ref_mb * 1e6:
            break
        ref.append(d)
        size += len(d.encode())
    plain = run_plain(tok, ref, root)
    threads = run_threads(tok, ref)
    shutil.rmtree(os.path.join(root, profile))
    row = Row(profile, len(docs), tokens["large"], round(small_s, 3), round(large_s, 3),
              round(ours), round(plain), round(threads), round(ours / plain, 2),
              round(ours / threads, 2))  # fmt: skip
    print(
        f"{profile:<12}{row.documents:>9}{row.tokens / row.documents:>8.0f}"
        f"{small_s:>9.2f}{large_s:>9.2f}{ours / 1e6:>10.2f}{plain / 1e6:>10.2f}"
        f"{threads / 1e6:>10.2f}{row.ours_vs_plain:>9.2f}x{row.ours_vs_threads:>9.2f}x",
        flush=True,
    )
    return row


def _tokens(tok, docs: list[str]) -> list[int]:
    """Each document's tokens (special tokens not counted), by HF: the same count for every
    contender."""
    return [
        len(e.ids)
        for i in range(0, len(docs), 2000)
        for e in tok.hf.encode_batch(docs[i : i + 2000], add_special_tokens=False)
    ]


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small-mb", type=float, default=120)
    parser.add_argument("--large-mb", type=float, default=240)
    parser.add_argument("--ref-mb", type=float, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lengths", default=",".join(PROFILES))
    parser.add_argument("--tokenizer", help="a vocab.txt (default: learned on a 5 MB sample)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    import tensorflow as tf  # noqa: F401  (imported before the clock, as the CLI does)

    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer

    root = tempfile.mkdtemp(prefix="feedgpu_bench_text_")
    try:
        vocab = args.tokenizer
        if not vocab:
            sample = make_corpus(os.path.join(root, "sample"), 5, seed=1, length="real")
            os.makedirs(os.path.join(root, "vocab"))
            train_tokenizer("train:wordpiece:8000", sample, os.path.join(root, "vocab"))
            vocab = os.path.join(root, "vocab", "vocab.txt")
        tok = load_tokenizer(TokenizerSpec.parse(vocab))
        print(
            f"{'profile':<12}{'docs':>9}{'tok/doc':>8}{'small s':>9}{'large s':>9}"
            f"{'(c) ours':>10}{'(b) plain':>10}{'(a) thr.':>10}{'ours/(b)':>10}{'ours/(a)':>10}"
            "   M tokens/s; ours: marginal, small to large"
        )
        rows = [measure(args, p, root, vocab, tok) for p in args.lengths.split(",")]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    by = {r.profile: r for r in rows}
    if "markup" in by and "markup-free" in by:
        ratio = by["markup"].ours_tok_s / by["markup-free"].ours_tok_s
        print(f"markup / markup-free: {ratio:.2f} (floor {MARKUP_FLOOR})")
    worst = min(
        rows, key=lambda r: min(r.ours_vs_plain / PLAIN_FLOOR, r.ours_vs_threads / THREADS_FLOOR)
    )
    print(f"floors: ours >= {PLAIN_FLOOR}x (b) and >= {THREADS_FLOOR}x (a') at every row; "
          f"lowest {worst.profile}: {worst.ours_vs_plain}x, {worst.ours_vs_threads}x")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=1)
    return rows


if __name__ == "__main__":
    main()
