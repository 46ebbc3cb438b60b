"""One worker of a real two-process MultiWorkerMirroredStrategy run, as a user's training script
would be; started twice by tests/test_multi_worker.py with TF_CONFIG naming both.

Usage: python tests/two_workers.py DATA GLOBAL_BATCH OUT_JSON

The strategy is made first (feedgpu.setup_devices), the pipeline is fed through
`distribute_datasets_from_function`, and a custom loop trains a small model with gradients
all-reduced across the two processes for one epoch. Each image is a flat colour that names its
example (tests/test_multi_worker.py makes them), so OUT_JSON records which examples every step
trained on: {"steps": [[example ids of the step]], "per_replica": [batch rows], "resumed": [...]}.
"resumed" is the epoch again from batch RESUME_AT, through an InputPosition moved there: the
batches a run resumed under two workers trains on.
"""

from __future__ import annotations

import json
import sys
from typing import Any

RESUME_AT = 2
STEP = 32  # the colour levels that name an example (tests/test_multi_worker.py)


def example_ids(images: Any) -> list[int]:
    """Each flat image's example id, from its colour (levels STEP apart survive JPEG)."""
    import numpy as np

    levels = np.rint(np.asarray(images, np.float64).mean(axis=(1, 2)) / STEP).astype(int)
    return [int(r * 64 + g * 8 + b) for r, g, b in levels]


def main(data: str, global_batch: int, out: str) -> None:
    import feedgpu
    from feedgpu import DeviceConfig, PipelineSpec

    setup = feedgpu.setup_devices(DeviceConfig(strategy="multi_worker", precision="float32"))
    import tensorflow as tf

    strategy = setup.strategy
    spec = PipelineSpec.for_dataset(
        data, batch_size=global_batch, training=True, seed=3, image_size=(8, 8)
    )
    holder: dict[str, Any] = {}

    def dataset_fn(context: Any) -> Any:
        holder["position"] = feedgpu.InputPosition(spec, context)
        return feedgpu.build_pipeline(spec, context, position=holder["position"])

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    with strategy.scope():
        model = tf.keras.Sequential(
            [tf.keras.layers.Input((8, 8, 3)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(4)]
        )
        optimizer = tf.keras.optimizers.SGD(0.001)

    @tf.function
    def train_step(batch: Any) -> Any:
        def replica(images: Any, labels: Any) -> Any:
            with tf.GradientTape() as tape:
                logits = model(images / 255.0, training=True)
                loss = tf.reduce_sum(
                    tf.keras.losses.sparse_categorical_crossentropy(
                        labels, logits, from_logits=True
                    )
                ) * (1.0 / global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return images

        return strategy.run(replica, args=batch)

    steps, rows = [], []
    for batch in dist:
        images = train_step(batch)
        local = strategy.experimental_local_results(images)
        rows += [int(t.shape[0]) for t in local]
        steps.append([i for t in local for i in example_ids(t.numpy())])
        holder["position"].advance()
    holder["position"].reset(RESUME_AT)
    resumed = [example_ids(strategy.experimental_local_results(b[0])[0].numpy()) for b in dist]
    with open(out, "w") as f:
        json.dump({"steps": steps, "per_replica": rows, "resumed": resumed}, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
