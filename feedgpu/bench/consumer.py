"""The timed training loop and its small synthetic models that do real work.

A ResNet-style CNN for images and a Transformer encoder for token ids, trained with a real
optimizer under the precision, XLA and strategy `device` chose. The loop times each step
and, separately, the time spent blocked waiting for the next batch: the two numbers the verdict
of `bench-input` is made of.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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


def make_train_step(workload: Workload, setup: DeviceSetup, accumulate: int = 1) -> Any:
    """A compiled function: one (distributed) batch in, one optimizer update, the loss out.

    With accumulate=K each replica's batch is split into K micro-batches whose gradients are
    summed in a loop before one update: the memory of batch/K, the statistics of the batch.
    Under float16 the loss is scaled (and the update skipped on overflow) by Keras's
    LossScaleOptimizer. Without a distribution strategy the whole step, update included, is
    one XLA cluster; under one, XLA compiles the gradient computation and the all-reduce and
    the update run outside it (cross-replica calls cannot be compiled).
    """
    import keras
    import tensorflow as tf

    if accumulate < 1:
        raise UsageError(f"accumulate {accumulate}: must be at least 1")
    model = workload.model
    with setup.strategy.scope():
        # What each architecture is usually trained with: SGD with momentum for CNNs, Adam for
        # Transformers (SGD at a CNN's learning rate diverges on them).
        if workload.name.startswith("transformer"):
            optimizer = keras.optimizers.Adam(learning_rate=1e-4)
        else:
            optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
        if setup.precision == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        # Slot variables now, under the scope: created inside the first (replicated, compiled)
        # step they would have to be lifted out of it, which MirroredStrategy cannot do.
        optimizer.build(model.trainable_variables)

    def split(batch: Any) -> tuple[Any, Any]:
        if isinstance(batch, tuple):
            return batch[0], batch[1]
        return batch, None

    def gradients(features: Any, labels: Any) -> tuple[Any, Any]:
        scale = getattr(optimizer, "scale_loss", None)
        return compute_gradients(workload, features, labels, accumulate, scale)

    def replica_step(batch: Any, compute: Callable[..., Any]) -> Any:
        features, labels = split(batch)
        loss, grads = compute(features, labels)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return tf.cast(loss, tf.float32)

    if not setup.distributed:
        return tf.function(lambda batch: replica_step(batch, gradients), jit_compile=setup.xla)
    compiled = tf.function(gradients, jit_compile=setup.xla)

    @tf.function
    def distributed(batch: Any) -> Any:
        losses = setup.strategy.run(replica_step, args=(batch, compiled))
        return setup.strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    return distributed


def compute_gradients(
    workload: Workload,
    features: Any,
    labels: Any,
    accumulate: int = 1,
    scale: Callable[[Any], Any] | None = None,
) -> tuple[Any, list[Any]]:
    """The batch's mean loss and its gradients, from `accumulate` equal micro-batches.

    The micro-batches run one after another in a loop (peak activation memory of one
    micro-batch); their gradients are averaged, which equals the whole batch's gradient when
    the loss is a mean over examples. `scale` multiplies the loss before differentiation
    (float16 loss scaling); the gradients returned are of the scaled loss.
    """
    import tensorflow as tf

    variables = workload.model.trainable_variables

    def one(f: Any, y: Any) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            loss = workload.loss(f, y)
            scaled = scale(loss) if scale else loss
        return loss, tape.gradient(scaled, variables)

    if accumulate == 1:
        return one(features, labels)

    # Reshape to [K, B/K, ...] and index: every micro-batch has a static shape for XLA.
    def micro(t: Any) -> Any:
        if t.shape[0] is not None and t.shape[0] % accumulate:
            raise UsageError(
                f"batch of {t.shape[0]} per replica does not split into --accumulate "
                f"{accumulate} equal micro-batches"
            )
        return tf.reshape(t, tf.concat([[accumulate, -1], tf.shape(t)[1:]], 0))

    parts = tf.nest.map_structure(micro, (features, labels))
    total = [tf.zeros_like(v) for v in variables]
    loss_sum = tf.constant(0.0)
    for i in tf.range(accumulate):
        f, y = tf.nest.map_structure(lambda t: t[i], parts)  # noqa: B023
        loss, grads = one(f, y)
        total = [a + tf.cast(g, a.dtype) for a, g in zip(total, grads, strict=True)]
        loss_sum += tf.cast(loss, tf.float32)
    return loss_sum / accumulate, [g / accumulate for g in total]


@dataclass
class StepTimes:
    """Per-step timings of a run of the training loop (compile steps excluded).

    Attributes:
        wait_s: time blocked in `next()` for each timed step's batch.
        compute_s: time from having the batch to having the step's loss, per timed step.
        examples: examples in the timed steps.
        warmup_steps: steps not timed (first steps, and each step with a new input shape,
            which compiles).
        losses: the loss of the first and the last timed step.
    """

    wait_s: list[float] = field(default_factory=list)
    compute_s: list[float] = field(default_factory=list)
    examples: int = 0
    warmup_steps: int = 0
    losses: list[float] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        return sum(self.wait_s) + sum(self.compute_s)

    @property
    def examples_per_s(self) -> float:
        return self.examples / self.total_s if self.total_s else 0.0

    @property
    def input_share(self) -> float:
        """Share of step time spent waiting for input (the TF Profiler's input-bound measure)."""
        return sum(self.wait_s) / self.total_s if self.total_s else 0.0

    def step_ms(self, quantile: float) -> float:
        steps = sorted(w + c for w, c in zip(self.wait_s, self.compute_s, strict=True))
        if not steps:
            return 0.0
        if quantile == 0.5:
            return 1000 * statistics.median(steps)
        return 1000 * steps[min(len(steps) - 1, int(quantile * len(steps)))]


def batch_size_of(batch: Any) -> int:
    """Examples in a (possibly distributed) batch."""
    import tensorflow as tf

    first = tf.nest.flatten(batch)[0]
    values = getattr(first, "values", None)  # PerReplica
    if values is not None:
        return sum(int(v.shape[0]) for v in values)
    return int(first.shape[0])


def _signature(batch: Any) -> tuple[Any, ...]:
    import tensorflow as tf

    return tuple(tuple(t.shape) for t in tf.nest.flatten(batch, expand_composites=True))


def time_steps(
    step: Any,
    batches: Iterator[Any],
    *,
    seconds: float,
    max_steps: int | None = None,
    warmup_steps: int = 2,
    progress: Callable[[int], None] | None = None,
    on_step: Callable[[int], Any] | None = None,
) -> StepTimes:
    """Run `step` on batches from `batches` for about `seconds` (after warm-up), timing each.

    The loss is fetched every step: that waits for the accelerator, so a step's compute time
    is really the accelerator's, and the time in `next()` is really input wait. Steps whose
    input shapes were not seen before compile (XLA) and are never timed.

    Args:
        on_step: called with each timed step's index before it runs (e.g. a profiler trace);
            the returned context manager, if any, wraps the step.
    """
    times = StepTimes()
    seen: set[tuple[Any, ...]] = set()
    start = None
    began = time.perf_counter()
    index = 0
    while True:
        now = time.perf_counter()
        if start is not None and (now - start >= seconds or (max_steps and index >= max_steps)):
            break
        if start is None and now - began > 10 * seconds + 120:
            break  # every batch has a new shape: nothing can be timed without compiling
        t0 = time.perf_counter()
        try:
            batch = next(batches)
        except StopIteration:
            break
        t1 = time.perf_counter()
        signature = _signature(batch)
        timed = times.warmup_steps >= warmup_steps and signature in seen
        seen.add(signature)
        context = on_step(index) if timed and on_step else None
        if context is not None:
            with context:
                loss = float(step(batch))
        else:
            loss = float(step(batch))
        t2 = time.perf_counter()
        if not timed:
            times.warmup_steps += 1
            continue
        if start is None:
            start = t0
        times.wait_s.append(t1 - t0)
        times.compute_s.append(t2 - t1)
        times.examples += batch_size_of(batch)
        if not times.losses:
            times.losses.append(loss)
        index += 1
        if progress:
            progress(1)
    if times.losses:
        times.losses.append(loss)
    return times
