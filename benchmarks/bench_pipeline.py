"""How fast does `build_pipeline` feed, against a ceiling, a naive pipeline and TFDS's reader?

Images (an epoch's worth of a repeated pipeline each after a warm-up, ours after a whole epoch,
alternating, batches of 128 at 224x224, training augmentation; ours also timed cold, one epoch
of a fresh pipeline):
  (a) ceiling: fused decode-and-crop alone, parallel, from records already in memory;
  (b) naive: sequential map, full decode then crop, no prefetch;
  (c) TFDS: `builder_from_directory(...).as_dataset` plus a straightforward parallel map;
  (d) ours: `build_pipeline(PipelineSpec.for_dataset(..., training=True))`.
Targets: ours >= 0.9x (a), >= 2x (b), >= 1.1x (c).
Text, per document length profile (--text-lengths: medium ~300 tokens a document, short ~40;
tokens/s and documents/s delivered in batches of --text-batch, counted on the host): (a) ours
from pre-tokenized shards (`PipelineSpec.for_dataset` defaults: pad mode) vs the same corpus
tokenized on the fly (b) with tensorflow-text fast WordPiece in a parallel map and (c) with HF
tokenizers through `tf.py_function`, all padded to the same width, each over an epoch's worth
of tokens of a repeated pipeline after a warm-up (a long run's rate: a tiny corpus would
otherwise mostly time each epoch's iterator start-up, ~50-100 ms here; ours warms up for a
whole epoch, which fills its cache). Ours is also timed cold (one epoch from disk, filling its
cache) and from disk every epoch (cache=None: a corpus larger than the memory budget). (f) floor:
the least a pipeline over the stored records does (records cached, batched, `parse_example`,
padded; blocks of documents split at their lengths), to show what the record format itself
allows. The physical reference: the rate at which this machine copies the stored ids (int64,
numpy, an epoch's worth). Targets: >= 5x (b) on medium documents, >= 3x on short, >= 30x (c).
Also padding waste with fixed padding vs bucketing (target <= 10%).

Usage: python benchmarks/bench_pipeline.py [--images 3000] [--text-mb 20] [--rounds 3]
       [--batch 128] [--text-batch 128] [--text-lengths medium,short] [--data DIR]
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
from collections.abc import Sequence
from dataclasses import asdict, dataclass

SIZE = (224, 224)


@dataclass(frozen=True)
class TextRates:
    """Median tokens/s of each text contender on one length profile, and padding waste."""

    profile: str
    documents: int
    tokens: int
    width: int
    ours_tok_s: float
    ours_cold_tok_s: float
    ours_disk_tok_s: float
    copy_tok_s: float
    fast_wordpiece_tok_s: float
    hf_py_function_tok_s: float
    floor_tok_s: float
    waste_fixed: float
    waste_bucketed: float

    def docs_s(self, tok_s: float) -> float:
        return tok_s * self.documents / self.tokens


@dataclass(frozen=True)
class PipelineBenchResult:
    """Median rates of each contender, and padding waste."""

    images: int
    ceiling_img_s: float
    ours_cold_img_s: float
    naive_img_s: float
    tfds_img_s: float
    ours_img_s: float
    text: list[TextRates]


def _epoch(ds, count) -> float:
    start = time.perf_counter()
    n = 0
    for batch in ds:
        n += count(batch)
    return n / (time.perf_counter() - start)


def _steady(ds, count, target: int, warm: int = 0) -> float:
    """Items/s over at least `target` items of a repeated dataset, after a warm-up (3 batches,
    and at least `warm` items): the rate of a long training run, without the per-epoch
    iterator start-up a tiny corpus inflates."""
    it = iter(ds)
    seen = sum(count(next(it)) for _ in range(3))
    while seen < warm:
        seen += count(next(it))
    start = time.perf_counter()
    n = 0
    while n < target:
        n += count(next(it))
    return n / (time.perf_counter() - start)


def image_rates(data: str, batch: int) -> dict[str, float]:
    import tensorflow as tf
    import tensorflow_datasets as tfds

    import feedgpu
    from feedgpu.pipeline.images import crop_window, decode_crop_resize

    spec = feedgpu.PipelineSpec.for_dataset(data, batch_size=batch, training=True)
    examples = list(feedgpu.read_dataset(spec.with_changes(shuffle_buffer=0, cache=None)))
    images = tf.constant([e["image"].numpy() for e in examples])
    heights = tf.constant([int(e["height"]) for e in examples])
    widths = tf.constant([int(e["width"]) for e in examples])
    files = sorted(tf.io.gfile.glob(os.path.join(data, "*.tfrecord-*")))
    area, aspect = spec.crop_area, spec.crop_aspect

    def fused(image, h, w):
        window = crop_window(h, w, True, None, 0.875, area, aspect)
        return decode_crop_resize(image, window, SIZE)

    # The ceiling gets every advantage: records in memory, no shuffling, and tf.data's
    # autotuner off (it sometimes leaves a map on one core here; see PipelineSpec.autotune).
    best = tf.data.Options()
    best.autotune.enabled = False
    ceiling = (
        tf.data.Dataset.from_tensor_slices((images, heights, widths))
        .repeat()
        .map(fused, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch)
        .prefetch(2)
        .with_options(best)
    )

    parse_spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }

    def naive_map(record):
        ex = tf.io.parse_single_example(record, parse_spec)
        image = tf.io.decode_jpeg(ex["image"], channels=3)
        shape = tf.shape(image)
        side = tf.minimum(shape[0], shape[1])
        image = tf.image.random_crop(image, tf.stack([side, side, 3]))
        return tf.image.resize(image, SIZE), ex["label"]

    naive = tf.data.TFRecordDataset(files).repeat().map(naive_map).batch(batch)

    def tfds_map(ex):
        image = ex["image"]
        shape = tf.shape(image)
        side = tf.minimum(shape[0], shape[1])
        image = tf.image.random_crop(image, tf.stack([side, side, 3]))
        image = tf.image.random_flip_left_right(tf.image.resize(image, SIZE))
        return image, ex["label"]

    builder = tfds.builder_from_directory(data)
    tfds_ds = (
        builder.as_dataset(split="train", shuffle_files=True)
        .repeat()
        .map(tfds_map, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch)
        .prefetch(2)
    )
    cold = feedgpu.build_pipeline(spec)
    ours = feedgpu.build_pipeline(spec.with_changes(repeat=True))

    def count(b):
        return int((b[0] if isinstance(b, tuple) else b).shape[0])

    n = len(examples)  # an epoch's worth of images each
    return {
        "ceiling": _steady(ceiling, count, n),
        "naive": _steady(naive, count, n),
        "tfds": _steady(tfds_ds, count, n),
        "ours_cold": _epoch(cold, count),
        "ours": _steady(ours, count, n, warm=n),  # after an epoch fills the cache
    }


def text_rates(corpus: str, data: str, vocab: str, batch: int, tokens: int) -> dict[str, float]:
    """Tokens/s delivered: ours cold (one epoch from disk, filling the cache) and steady (a
    long run, the cache full), the two tokenize-on-the-fly pipelines (steady: every epoch
    costs them the same), and the floor of one record per document."""
    import glob

    import tensorflow as tf
    from text_reference import fast_bert
    from tokenizers import Tokenizer

    import feedgpu
    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer

    spec = feedgpu.PipelineSpec.for_dataset(data, batch_size=batch, training=True)
    width = spec.max_length
    docs = []
    for name in sorted(os.listdir(corpus)):
        with open(os.path.join(corpus, name), encoding="utf-8") as f:
            docs += [json.loads(line)["text"] for line in f]
    tok = load_tokenizer(TokenizerSpec.parse(vocab))
    fast = fast_bert(tok)
    hf = Tokenizer.from_file(os.path.join(data, "tokenizer.json"))

    def tokens_in(b):  # the same host-side count for every contender
        mask = b["attention_mask"] if isinstance(b, dict) else tf.cast(b > 0, tf.int32)
        return int(mask.numpy().sum())

    def fast_map(texts):
        return fast.tokenize(texts)[:, :width].to_tensor(shape=[None, width])

    fast_ds = (
        tf.data.Dataset.from_tensor_slices(docs)
        .shuffle(10000)
        .repeat()
        .batch(batch)
        .map(fast_map, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(2)
    )

    def hf_encode(texts):
        ids = [e.ids[:width] for e in hf.encode_batch([t.decode() for t in texts.numpy()])]
        return tf.ragged.constant(ids, dtype=tf.int64).to_tensor(shape=[None, width])

    hf_ds = (
        tf.data.Dataset.from_tensor_slices(docs)
        .shuffle(10000)
        .repeat()
        .batch(batch)
        .map(
            lambda t: tf.py_function(hf_encode, [t], tf.int64), num_parallel_calls=tf.data.AUTOTUNE
        )
        .prefetch(2)
    )
    manifest = feedgpu.read_manifest(data)
    blocks = manifest.schema.blocks  # records of several documents: split at their lengths
    features = {k: tf.io.RaggedFeature(tf.int64) for k in ("input_ids", "length")[: 1 + blocks]}
    per_record = manifest.num_examples / sum(
        s.num_records for split in manifest.splits.values() for s in split.shards
    )

    def parse_pad(records):
        parsed = tf.io.parse_example(records, features)
        ids = parsed["input_ids"]
        if blocks:
            lengths = parsed["length"].flat_values
            ids = tf.RaggedTensor.from_row_lengths(ids.flat_values, lengths, validate=False)
        return ids[:, :width].to_tensor(shape=[None, width])

    floor_ds = (
        tf.data.TFRecordDataset(sorted(glob.glob(os.path.join(data, "*.tfrecord-*"))))
        .cache()
        .repeat()
        .batch(max(1, round(batch / per_record)), drop_remainder=True)
        .map(parse_pad, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(2)
    )
    return {
        **ours_text_rates(spec, tokens_in, tokens),
        "fast": _steady(fast_ds, tokens_in, tokens),
        "hf": _steady(hf_ds, tokens_in, tokens),
        "floor": _steady(floor_ds, tokens_in, tokens),
        "copy": _copy_rate(tokens),
    }


def ours_text_rates(spec, count, tokens: int) -> dict[str, float]:
    """Tokens/s of `build_pipeline(spec)`: its first epoch from disk (filling the cache), a
    long run (after an epoch has filled it), and every epoch from disk (cache=None)."""
    import feedgpu

    def ours(**changes):
        return feedgpu.build_pipeline(spec.with_changes(**changes)).map(lambda x, *_: x)

    return {
        "ours_cold": _epoch(ours(), count),
        "ours": _steady(ours(repeat=True), count, tokens, warm=tokens),
        "ours_disk": _steady(ours(repeat=True, cache=None), count, tokens),
    }


def _copy_rate(tokens: int) -> float:
    """Ids/s at which this machine copies an epoch's worth of int64 ids (numpy): the bytes'
    own speed, which no pipeline of them passes."""
    import numpy as np

    ids = np.arange(tokens, dtype=np.int64)
    out = np.empty_like(ids)
    np.copyto(out, ids)  # pages touched before the clock
    start = time.perf_counter()
    for _ in range(5):
        np.copyto(out, ids)
    return 5 * tokens / (time.perf_counter() - start)


def main(argv: Sequence[str] | None = None) -> PipelineBenchResult:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--text-mb", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128, help="image batch size")
    parser.add_argument("--text-batch", type=int, default=128)
    parser.add_argument("--text-lengths", default="medium,short", help="length profiles")
    parser.add_argument("--data", help="folder to keep generated data in between runs")
    args = parser.parse_args(argv)
    from bench_data import converted_images, make_corpus

    import feedgpu
    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer
    from feedgpu.pipeline.buckets import padding_waste

    tmp = tempfile.mkdtemp(prefix="bench_pipeline_")
    root = args.data or tmp
    try:
        out = converted_images(root, args.images)
        profiles = [p for p in args.text_lengths.split(",") if p]
        vocab = os.path.join(root, "vocab.txt")
        if not os.path.isfile(vocab):
            docs = make_corpus(os.path.join(tmp, "sample"), min(args.text_mb, 20) / 4)
            tokenizer = load_tokenizer(
                TokenizerSpec.parse("train:wordpiece:8000"), iter(docs[:2000])
            )
            tokenizer.save(root)
        texts = {}
        for profile in profiles:
            corpus = os.path.join(root, f"corpus-{profile}")
            if not os.path.isdir(corpus):
                make_corpus(corpus, args.text_mb, length=profile)
            texts[profile] = (corpus, os.path.join(root, f"text-{profile}"))
            shutil.rmtree(texts[profile][1], ignore_errors=True)
            feedgpu.convert_text(
                corpus, texts[profile][1], feedgpu.TextOptions(tokenizer=vocab), quiet=True
            )
        image_runs: dict[str, list[float]] = {}
        text_runs: dict[str, dict[str, list[float]]] = {p: {} for p in profiles}
        for r in range(args.rounds):
            for k, v in image_rates(out, args.batch).items():
                image_runs.setdefault(k, []).append(v)
            line = ", ".join(f"{k} {v[-1]:.0f} img/s" for k, v in image_runs.items())
            for profile, (corpus, text) in texts.items():
                tokens = feedgpu.read_manifest(text).text.tokens  # an epoch's worth
                for k, v in text_rates(corpus, text, vocab, args.text_batch, tokens).items():
                    text_runs[profile].setdefault(k, []).append(v)
                line += f"; {profile}: " + ", ".join(
                    f"{k} {v[-1] / 1e6:.2f} M tok/s" for k, v in text_runs[profile].items()
                )
            print(f"round {r + 1}: {line}", file=sys.stderr)
        med = {k: statistics.median(v) for k, v in image_runs.items()}
        text_results = []
        for profile, (_, text) in texts.items():
            stats = feedgpu.read_manifest(text).text
            counts = stats.length_counts  # longer ones are truncated: no padding
            spec = feedgpu.PipelineSpec.for_dataset(text)
            tm = {k: round(statistics.median(v), 1) for k, v in text_runs[profile].items()}
            text_results.append(
                TextRates(
                    profile=profile,
                    documents=stats.documents,
                    tokens=stats.tokens,
                    width=spec.max_length,
                    ours_tok_s=tm["ours"],
                    ours_cold_tok_s=tm["ours_cold"],
                    ours_disk_tok_s=tm["ours_disk"],
                    copy_tok_s=tm["copy"],
                    fast_wordpiece_tok_s=tm["fast"],
                    hf_py_function_tok_s=tm["hf"],
                    floor_tok_s=tm["floor"],
                    waste_fixed=round(padding_waste(counts, [spec.max_length]), 4),
                    waste_bucketed=round(padding_waste(counts, list(spec.bucket_boundaries)), 4),
                )
            )
        result = PipelineBenchResult(
            images=args.images,
            ceiling_img_s=round(med["ceiling"], 1),
            ours_cold_img_s=round(med["ours_cold"], 1),
            naive_img_s=round(med["naive"], 1),
            tfds_img_s=round(med["tfds"], 1),
            ours_img_s=round(med["ours"], 1),
            text=text_results,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    r = result
    print(
        f"images/s: (a) ceiling {r.ceiling_img_s:.0f}  (b) naive {r.naive_img_s:.0f}  "
        f"(c) TFDS {r.tfds_img_s:.0f}  (d) ours {r.ours_img_s:.0f} "
        f"(first epoch of a fresh pipeline {r.ours_cold_img_s:.0f})"
    )
    for t in r.text:
        print(
            f"{t.profile} ({t.documents} documents, {t.tokens / t.documents:.0f} tokens each, "
            f"padded to {t.width}): M tokens/s: ours {t.ours_tok_s / 1e6:.2f} (first epoch "
            f"from disk {t.ours_cold_tok_s / 1e6:.2f}, every epoch from disk "
            f"{t.ours_disk_tok_s / 1e6:.2f}; {t.ours_tok_s / t.copy_tok_s:.1%} of the "
            f"{t.copy_tok_s / 1e6:.0f} M ids/s this machine copies)  fast WordPiece on the fly "
            f"{t.fast_wordpiece_tok_s / 1e6:.2f}  HF py_function {t.hf_py_function_tok_s / 1e6:.2f}"
            f"  floor {t.floor_tok_s / 1e6:.2f}; k documents/s: ours "
            f"{t.docs_s(t.ours_tok_s) / 1e3:.0f}, on the fly "
            f"{t.docs_s(t.fast_wordpiece_tok_s) / 1e3:.0f}, "
            f"floor {t.docs_s(t.floor_tok_s) / 1e3:.0f}"
        )
        print(
            f"{t.profile} padding waste: fixed {t.width} {t.waste_fixed:.1%}, bucketed "
            f"{t.waste_bucketed:.1%} (target <= 10%)"
        )
    print(json.dumps(asdict(r)))
    text_targets = {"short": 3, "medium": 5, "long": 5}
    print(
        f"images: ours/(a) = {r.ours_img_s / r.ceiling_img_s:.2f}x (>= 0.9), "
        f"ours/(b) = {r.ours_img_s / r.naive_img_s:.2f}x (>= 2), "
        f"ours/(c) = {r.ours_img_s / r.tfds_img_s:.2f}x (>= 1.1); text: "
        + "; ".join(
            f"{t.profile} ours/(b) = {t.ours_tok_s / t.fast_wordpiece_tok_s:.1f}x "
            f"(>= {text_targets.get(t.profile, 5)}; every epoch from disk "
            f"{t.ours_disk_tok_s / t.fast_wordpiece_tok_s:.1f}x), ours/(c) = "
            f"{t.ours_tok_s / t.hf_py_function_tok_s:.1f}x (>= 30), "
            f"floor/(b) = {t.floor_tok_s / t.fast_wordpiece_tok_s:.1f}x"
            for t in r.text
        )
    )
    return result


if __name__ == "__main__":
    main()
