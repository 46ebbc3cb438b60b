"""A real custom training loop that checkpoints its input position with its model, as a user's
would; run as a script by tests/test_resume.py so that it can be killed with SIGKILL.

Usage: python tests/resume_loop.py SPEC_JSON CKPT_DIR LOG TOTAL_BATCHES SAVE_EVERY [KILL_AT]

Appends one line per trained batch to LOG: the batch's number over the run, its labels and a
hash of its exact bytes (augmented pixels, or token ids and masks), fsynced before the next
batch, so a kill leaves a log of what was trained on. With KILL_AT, the process sends itself
SIGKILL right after training batch number KILL_AT (no clean-up runs: a real preemption).
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

import feedgpu
from feedgpu import PipelineSpec


def batch_line(number: int, batch: object) -> str:
    """`number labels hash`: what a batch held, byte for byte."""
    parts = tf.nest.flatten(batch)
    digest = hashlib.sha256(b"".join(np.asarray(t).tobytes() for t in parts)).hexdigest()[:16]
    labels = np.asarray(parts[-1]).ravel()[:64].tolist()
    return f"{number} {','.join(map(str, labels))} {digest}"


def features(batch: Any) -> tuple[tf.Tensor, tf.Tensor]:
    """(inputs, targets) for the small model: pixels or ids, and labels (zeros if none)."""
    x, y = batch if isinstance(batch, tuple) else (batch, None)
    if isinstance(x, dict):  # a bucketed batch's width varies: the model sees each row's mean
        x = tf.reduce_mean(tf.cast(x["input_ids"], tf.float32), axis=1, keepdims=True)
    return x, tf.zeros(tf.shape(x)[:1], tf.int64) if y is None else y


def train(
    spec: PipelineSpec,
    ckpt_dir: str,
    total: int,
    save_every: int,
    on_batch: Callable[[str], None],
    kill_at: int = -1,
) -> np.ndarray:
    """Train a small model on `total` batches in all, resuming from ckpt_dir's latest
    checkpoint and telling on_batch each batch trained on; the final weights."""
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.layers.Flatten(), tf.keras.layers.Dense(4)])
    optimizer = tf.keras.optimizers.SGD(0.01)
    position = feedgpu.InputPosition(spec)
    ds = feedgpu.build_pipeline(spec, position=position)
    model(features(next(iter(ds)))[0])
    optimizer.build(model.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, input=position)
    manager = tf.train.CheckpointManager(checkpoint, ckpt_dir, max_to_keep=2)
    checkpoint.restore(manager.latest_checkpoint)

    @tf.function
    def step(x: tf.Tensor, y: tf.Tensor) -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - tf.cast(y[:, None], tf.float32)))
        optimizer.apply_gradients(
            zip(
                tape.gradient(loss, model.trainable_variables),
                model.trainable_variables,
                strict=True,
            )
        )

    while position.batches < total:
        for batch in ds:  # each pass starts where the position is
            step(*features(batch))
            on_batch(batch_line(position.batches, batch))
            position.advance()
            if position.batches % save_every == 0:
                manager.save(checkpoint_number=position.batches)
            if position.batches - 1 == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if position.batches >= total:
                break
    return np.concatenate([w.numpy().ravel() for w in model.weights])


def fit_with_backup(
    spec: PipelineSpec, backup_dir: str, kill_at: int = 0, verbose: int = 0
) -> tuple[Any, Any]:
    """A user's `model.fit` through FitBackup, with steps_per_execution=2 (which need not divide
    an epoch), 3 epochs, a backup every 4 batches; with kill_at, the process SIGKILLs itself
    once the optimizer has taken that many steps. The model and the History."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((32, 32, 3)), keras.layers.Flatten(), keras.layers.Dense(3)]
    )
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(keras.optimizers.SGD(0.001), loss, steps_per_execution=2)

    class Preempted(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            if kill_at and int(self.model.optimizer.iterations.numpy()) >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)  # no clean-up: a real preemption

    backup = feedgpu.FitBackup(spec, backup_dir, save_every=4)
    history = backup.fit(model, epochs=3, verbose=verbose, callbacks=[Preempted()])
    return model, history


def main() -> None:
    spec_json, ckpt_dir, log, total, save_every, *kill = sys.argv[1:]
    spec = PipelineSpec.from_json(Path(spec_json).read_text())
    kill_at = int(kill[0]) if kill else -1
    with open(log, "a") as out:

        def logged(line: str) -> None:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

        weights = train(spec, ckpt_dir, int(total), int(save_every), logged, kill_at)
    np.save(log + ".weights.npy", weights)


if __name__ == "__main__":
    main()
