"""Does bench-input's compute ceiling measure the program the user trains? Against plain Keras.

For real Keras models nobody here wrote (keras.applications built with weights=None: MobileNetV2,
ResNet50, EfficientNetB0 at a small size) and a Transformer text classifier, each compiled three
ways (Keras's default jit_compile="auto", jit_compile=False, jit_compile=True) and saved as a
user would save it, this puts side by side, in one process and alternating (ABBA...):
  (a) plain Keras: the saved model loaded and trained with `model.fit` on resident batches (its
      own compile settings), the median step after the first ones (which compile);
  (b) bench-input's compute ceiling for the same saved file (`--model PATH`, `--xla auto`).
Prints examples/s of both and (b)/(a) per row, the worst ratio last (target 0.85-1.15 on every
row). The ceiling is what the capacity plan and the verdict are built on: it must be the
user's step, not another program.

Usage: python benchmarks/bench_fidelity.py [--models mobilenet_v2,resnet50,efficientnet_b0,
       transformer] [--size 64] [--batch 16] [--steps 30] [--seconds 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

MODELS = ("mobilenet_v2", "resnet50", "efficientnet_b0", "transformer", "tiny")
COMPILES = {"auto": "auto", "false": False, "true": True}
TEXT_LENGTH = 64
LOW, HIGH = 0.85, 1.15


@dataclass(frozen=True)
class FidelityRow:
    """One saved model compiled one way: plain Keras against bench-input's ceiling."""

    model: str
    jit_compile: str
    xla_ran: bool
    keras_examples_per_s: float
    bench_examples_per_s: float
    bench_xla_reason: str

    @property
    def ratio(self) -> float:
        return self.bench_examples_per_s / self.keras_examples_per_s

    @property
    def within(self) -> bool:
        return LOW <= self.ratio <= HIGH


def build_model(name: str, size: int, classes: int, vocab: int) -> object:
    """The model as a user would make it (fresh weights: nothing is downloaded)."""
    import keras

    apps = {
        "mobilenet_v2": keras.applications.MobileNetV2,
        "resnet50": keras.applications.ResNet50,
        "efficientnet_b0": keras.applications.EfficientNetB0,
    }
    if name in apps:
        return apps[name](input_shape=(size, size, 3), weights=None, classes=classes)
    if name == "tiny":
        inputs = keras.Input((size, size, 3))
        x = keras.layers.Conv2D(8, 3, activation="relu")(keras.layers.Rescaling(1 / 255)(inputs))
        x = keras.layers.GlobalAveragePooling2D()(x)
        return keras.Model(inputs, keras.layers.Dense(classes)(x), name="tiny")
    ids = keras.Input((TEXT_LENGTH,), dtype="int32", name="input_ids")
    x = keras.layers.Embedding(vocab, 64)(ids)
    for _ in range(2):
        attended = keras.layers.MultiHeadAttention(4, 16)(x, x)
        x = keras.layers.LayerNormalization()(x + attended)
        hidden = keras.layers.Dense(128, activation="relu")(x)
        x = keras.layers.LayerNormalization()(x + keras.layers.Dense(64)(hidden))
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(ids, keras.layers.Dense(classes)(x), name="transformer")


def save_model(name: str, jit: object, size: int, classes: int, vocab: int, path: str) -> None:
    import keras

    keras.utils.set_random_seed(0)
    model = build_model(name, size, classes, vocab)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=name in ("transformer", "tiny"))
    model.compile(keras.optimizers.Adam(1e-4), loss, jit_compile=jit)  # type: ignore[attr-defined]
    model.save(path)  # type: ignore[attr-defined]


def keras_rate(path: str, batch: tuple[object, object], steps: int, seconds: float) -> float:
    """Examples/s of `model.fit` on one resident batch, as the saved model was compiled: the
    median step over at least `steps` steps and `seconds` of timed steps (as long as
    bench-input's measurement: a fixed count of ~10 ms steps is a third of a second, which one
    hiccup of a shared host moves by 10%)."""
    import keras
    import tensorflow as tf

    model = keras.saving.load_model(path)
    times: list[float] = []
    warm = 3  # the first steps compile

    class Clock(keras.callbacks.Callback):
        def on_train_batch_begin(self, step: int, logs: object = None) -> None:
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, step: int, logs: object = None) -> None:
            times.append(time.perf_counter() - self.t0)
            timed = times[warm:]
            if len(timed) >= steps and sum(timed) >= seconds:
                self.model.stop_training = True

    data = tf.data.Dataset.from_tensors(batch).repeat()
    model.fit(data, steps_per_epoch=10**6, epochs=1, verbose=0, callbacks=[Clock()])
    examples = int(tf.nest.flatten(batch)[0].shape[0])
    return examples / statistics.median(times[warm:])


def bench_rate(path: str, data: str, batch_size: int, seconds: float) -> tuple[float, bool, str]:
    import feedgpu
    from feedgpu.bench.device import resolve_devices

    options = feedgpu.BenchOptions(
        model=path, batch_size=batch_size, seconds=seconds, ablation="never", quiet=True
    )
    report = feedgpu.bench_input(data, options, setup=resolve_devices())
    assert report.run is not None
    return report.ceiling.examples_per_s, report.run.xla, report.run.xla_reason


def make_data(workdir: str, size: int, text: bool) -> tuple[str, int, int]:
    """A dataset for bench-input (its resident batches come from it): sample images, or a
    labelled JSONL corpus tokenized with a trained WordPiece. Returns (path, classes, vocab)."""
    import random

    import feedgpu

    if not text:
        src = os.path.join(workdir, "images")
        if not os.path.isdir(os.path.join(workdir, "image-data")):
            from feedgpu.samples import write_sample_images

            write_sample_images(src, num_classes=4, images_per_class=32)
            feedgpu.convert_images(src, os.path.join(workdir, "image-data"), quiet=True)
        return os.path.join(workdir, "image-data"), 4, 0
    out = os.path.join(workdir, "text-data")
    if not os.path.isdir(out):
        rng = random.Random(0)
        words = [f"w{i}" for i in range(500)]
        os.makedirs(os.path.join(workdir, "corpus"), exist_ok=True)
        with open(os.path.join(workdir, "corpus", "part.jsonl"), "w", encoding="utf-8") as f:
            for i in range(2000):
                text_words = " ".join(rng.choice(words) for _ in range(rng.randint(20, 120)))
                f.write(json.dumps({"text": text_words, "label": i % 2}) + "\n")
        options = feedgpu.TextOptions(tokenizer="train:wordpiece:1000", label_field="label")
        feedgpu.convert_text(os.path.join(workdir, "corpus"), out, options, quiet=True)
    vocab = feedgpu.read_manifest(out).tokenizer.vocab_size  # type: ignore[union-attr]
    return out, 2, vocab


def resident_batch(name: str, size: int, batch: int, classes: int, vocab: int):
    import numpy as np

    rng = np.random.default_rng(0)
    labels = rng.integers(0, classes, batch)
    if name == "transformer":
        return rng.integers(1, vocab, (batch, TEXT_LENGTH)).astype("int32"), labels
    return rng.uniform(0, 255, (batch, size, size, 3)).astype("float32"), labels


def main(argv: Sequence[str] | None = None) -> list[FidelityRow]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="mobilenet_v2,resnet50,efficientnet_b0,transformer")
    parser.add_argument("--compiles", default="auto,false,true", help="jit_compile values")
    parser.add_argument("--size", type=int, default=64, help="image models' input size")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30, help="timed model.fit steps, at least")
    parser.add_argument("--seconds", type=float, default=3, help="bench-input's --seconds")
    parser.add_argument("--rounds", type=int, default=2, help="alternating (a)/(b) rounds")
    parser.add_argument("--data", help="keep the generated datasets here")
    args = parser.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    compiles = [c for c in args.compiles.split(",") if c]
    if set(names) - set(MODELS) or set(compiles) - set(COMPILES):
        parser.error(f"--models from {', '.join(MODELS)}; --compiles from auto,false,true")
    workdir = args.data or tempfile.mkdtemp(prefix="bench-fidelity-")
    rows = []
    for name in names:
        data, classes, vocab = make_data(workdir, args.size, name == "transformer")
        batch = resident_batch(name, args.size, args.batch, classes, vocab)
        for jit in compiles:
            path = os.path.join(workdir, f"{name}-{jit}.keras")
            save_model(name, COMPILES[jit], args.size, classes, vocab, path)
            keras_rates, bench_rates = [], []
            for r in range(args.rounds):  # ABBA...: drift, and a cold first run, fall on both
                first_keras = r % 2 == 0
                if first_keras:
                    keras_rates.append(keras_rate(path, batch, args.steps, args.seconds))
                rate, xla, why = bench_rate(path, data, args.batch, args.seconds)
                bench_rates.append(rate)
                if not first_keras:
                    keras_rates.append(keras_rate(path, batch, args.steps, args.seconds))
            row = FidelityRow(
                name,
                jit,
                xla,
                statistics.median(keras_rates),
                statistics.median(bench_rates),
                why,
            )
            rows.append(row)
            print(
                f"{name} jit_compile={jit}: keras {row.keras_examples_per_s:.1f}, "
                f"bench-input {row.bench_examples_per_s:.1f} examples/s ({row.ratio:.2f}x)",
                file=sys.stderr,
            )
    print(
        f"{'model':<17}{'jit_compile':>12}{'ran':>8}{'(a) keras':>12}{'(b) ceiling':>13}"
        f"{'(b)/(a)':>9}  why"
    )
    for r in rows:
        print(
            f"{r.model:<17}{r.jit_compile:>12}{'XLA' if r.xla_ran else 'no XLA':>8}"
            f"{r.keras_examples_per_s:>12.1f}{r.bench_examples_per_s:>13.1f}{r.ratio:>8.2f}x"
            f"  {r.bench_xla_reason}"
        )
    for r in rows:
        print(json.dumps({**asdict(r), "ratio": round(r.ratio, 3)}))
    worst = max(rows, key=lambda r: abs(r.ratio - 1))
    print(
        f"rows within {LOW}-{HIGH}: {sum(r.within for r in rows)}/{len(rows)}; worst (b)/(a) = "
        f"{worst.ratio:.2f}x ({worst.model}, jit_compile={worst.jit_compile})"
    )
    return rows


if __name__ == "__main__":
    main()
