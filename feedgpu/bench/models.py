"""The synthetic models bench-input trains: small but real work.

A ResNet-style CNN for images and a Transformer encoder for token ids (a classifier with labels,
a language-model head without), built under the precision and strategy `device` chose.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from feedgpu.bench.device import DeviceSetup
from feedgpu.errors import UsageError

MODEL_SIZES = ("small", "medium", "large")
# (stage widths, residual blocks per stage): "large" is ResNet-18's shape.
_CNN = {
    "small": ((32, 64, 128), 1),
    "medium": ((64, 128, 256), 2),
    "large": ((64, 128, 256, 512), 2),
}
# (width, layers, heads)
_TRANSFORMER = {"small": (128, 2, 4), "medium": (256, 4, 4), "large": (512, 8, 8)}


@dataclass(frozen=True)
class Workload:
    """A model and how to compute its loss from one pipeline batch.

    Attributes:
        model: the Keras model (built under the setup's strategy).
        loss: (features, labels) -> scalar loss; labels may be None (language modelling).
        name: e.g. "cnn-small".
    """

    model: Any
    loss: Callable[[Any, Any], Any]
    name: str


def build_workload(
    kind: str,
    size: str,
    setup: DeviceSetup,
    *,
    num_classes: int = 0,
    image_size: tuple[int, int] = (224, 224),
    vocab_size: int = 30522,
    max_length: int = 512,
) -> Workload:
    """The synthetic model for a dataset kind ("image" or "text") and size, ready to train.

    Text with labels (num_classes > 0) trains a classifier on the masked mean of the encoder's
    outputs; text without labels trains a language-model head over the vocabulary (the
    encoder predicts each id: real matmul work of the size a pre-training run does). Images
    need num_classes > 0. Outputs stay float32 under
    mixed precision, so the softmax and the loss are computed in full precision.
    """
    import tensorflow as tf

    if size not in MODEL_SIZES:
        raise UsageError(f"model size {size!r}: choose one of {', '.join(MODEL_SIZES)}")
    if kind == "image" and num_classes < 1:
        raise UsageError("an image model needs num_classes >= 1")
    with setup.strategy.scope():
        if kind == "image":
            model = _cnn(size, image_size, num_classes, setup.precision)
            name = f"cnn-{size}"
        else:
            model = _encoder_class()(size, vocab_size, max_length, num_classes, setup.precision)
            # Create every variable now, under the strategy's scope.
            model((tf.zeros([1, 8], tf.int32), tf.ones([1, 8])), pooled=num_classes > 0)
            name = f"transformer-{size}"

    def loss(features: Any, labels: Any) -> Any:
        if kind == "image":  # uint8 batches are cast here, on the accelerator
            logits = model(tf.cast(features, tf.float32), training=True)
            return tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(tf.cast(labels, tf.int32), logits)
            )
        ids = tf.cast(features["input_ids"], tf.int32)
        mask = tf.cast(features["attention_mask"], tf.float32)
        if num_classes:
            logits = model((ids, mask), training=True, pooled=True)
            return tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(tf.cast(labels, tf.int32), logits)
            )
        logits = model((ids, mask), training=True, pooled=False)
        per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(ids, logits)
        return tf.reduce_sum(per_token * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)

    return Workload(model=model, loss=loss, name=name)


def _cnn(size: str, image_size: tuple[int, int], num_classes: int, policy: str) -> Any:
    import keras

    widths, blocks = _CNN[size]
    inputs = keras.Input((*image_size, 3))
    # Scaling to [-1, 1] happens here, on the accelerator, not on the host.
    x = keras.layers.Rescaling(1 / 127.5, offset=-1.0, dtype=policy)(inputs)
    x = keras.layers.Conv2D(widths[0], 7, strides=2, padding="same", use_bias=False, dtype=policy)(
        x
    )
    x = keras.layers.BatchNormalization(dtype=policy)(x)
    x = keras.layers.ReLU(dtype=policy)(x)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same", dtype=policy)(x)
    for stage, width in enumerate(widths):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            shortcut = x
            if stride != 1 or x.shape[-1] != width:
                shortcut = keras.layers.Conv2D(width, 1, strides=stride, dtype=policy)(x)
            x = keras.layers.Conv2D(
                width, 3, strides=stride, padding="same", use_bias=False, dtype=policy
            )(x)
            x = keras.layers.BatchNormalization(dtype=policy)(x)
            x = keras.layers.ReLU(dtype=policy)(x)
            x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False, dtype=policy)(x)
            x = keras.layers.BatchNormalization(dtype=policy)(x)
            x = keras.layers.ReLU(dtype=policy)(keras.layers.Add(dtype=policy)([x, shortcut]))
    x = keras.layers.GlobalAveragePooling2D(dtype=policy)(x)
    outputs = keras.layers.Dense(num_classes, dtype="float32")(x)
    return keras.Model(inputs, outputs, name=f"cnn_{size}")


def _encoder_class() -> Any:
    import keras
    import tensorflow as tf

    class Encoder(keras.Model):
        """Pre-norm Transformer encoder over token ids with a padding mask."""

        def build(self, input_shape: Any) -> None:
            """Sub-layers build on first call; nothing of the model's own to create."""

        def __init__(
            self, size: str, vocab: int, max_length: int, num_classes: int, policy: str
        ) -> None:
            super().__init__(name=f"transformer_{size}")
            width, layers, heads = _TRANSFORMER[size]
            self.embed = keras.layers.Embedding(vocab, width, dtype=policy)
            self.position = keras.layers.Embedding(max_length, width, dtype=policy)
            self.blocks = []
            for _ in range(layers):
                self.blocks.append(
                    (
                        keras.layers.LayerNormalization(dtype=policy),
                        keras.layers.MultiHeadAttention(heads, width // heads, dtype=policy),
                        keras.layers.LayerNormalization(dtype=policy),
                        keras.layers.Dense(4 * width, activation="gelu", dtype=policy),
                        keras.layers.Dense(width, dtype=policy),
                    )
                )
            self.final = keras.layers.LayerNormalization(dtype=policy)
            # One head: classes when the data is labelled, else the vocabulary.
            self.head = keras.layers.Dense(num_classes or vocab, dtype="float32")

        def call(self, inputs: Any, training: bool = False, pooled: bool = True) -> Any:
            ids, mask = inputs
            length = tf.shape(ids)[1]
            x = self.embed(ids) + self.position(tf.range(length))[tf.newaxis]
            attend = tf.cast(mask[:, tf.newaxis, :], tf.bool)
            for norm1, attention, norm2, up, down in self.blocks:
                h = norm1(x)
                x = x + attention(h, h, attention_mask=attend, training=training)
                x = x + down(up(norm2(x)))
            x = self.final(x)
            if not pooled:
                return self.head(x)
            weights = tf.cast(mask, x.dtype)[:, :, tf.newaxis]
            mean = tf.reduce_sum(x * weights, 1) / tf.maximum(tf.reduce_sum(weights, 1), 1)
            return self.head(mean)

    return Encoder
