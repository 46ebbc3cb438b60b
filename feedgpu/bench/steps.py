"""The timed training loop: the train step (XLA, precision, gradient accumulation), and each
step's time and, separately, its time blocked waiting for the next batch: the two numbers the
verdict of `bench-input` is made of.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from feedgpu.bench.device import DeviceSetup
from feedgpu.bench.models import Workload
from feedgpu.errors import UsageError


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
        # reduce_retracing, as Keras compiles a step: text buckets trace without warnings
        return tf.function(
            lambda batch: replica_step(batch, gradients),
            jit_compile=setup.xla,
            reduce_retracing=True,
        )
    compiled = tf.function(gradients, jit_compile=setup.xla, reduce_retracing=True)

    @tf.function(reduce_retracing=True)
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
        stopped_early: the time cap ended the run before its minimum of steps.
    """

    wait_s: list[float] = field(default_factory=list)
    compute_s: list[float] = field(default_factory=list)
    examples: int = 0
    warmup_steps: int = 0
    losses: list[float] = field(default_factory=list)
    stopped_early: bool = False

    @classmethod
    def merged(cls, parts: list[StepTimes]) -> StepTimes:
        """The rounds of one phase as one run."""
        whole = cls()
        for part in parts:
            whole.wait_s += part.wait_s
            whole.compute_s += part.compute_s
            whole.examples += part.examples
            whole.warmup_steps += part.warmup_steps
            whole.stopped_early |= part.stopped_early
        losses = [part.losses for part in parts if part.losses]
        whole.losses = [losses[0][0], losses[-1][-1]] if losses else []
        return whole

    def add_call(self, waits: list[float], compute_s: float, examples: int) -> None:
        """One timed call: a step, or an execution of several (each batch its own wait, the
        call's compute time shared out among them)."""
        self.wait_s += waits
        self.compute_s += [compute_s / len(waits)] * len(waits)
        self.examples += examples

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


def _next_batches(batches: Iterator[Any], count: int) -> tuple[list[Any], list[float]]:
    """The next `count` batches and the time blocked waiting for each."""
    group, waits = [], []
    for _ in range(count):
        t0 = time.perf_counter()
        group.append(next(batches))
        waits.append(time.perf_counter() - t0)
    return group, waits


def time_steps(
    step: Any,
    batches: Iterator[Any],
    *,
    seconds: float,
    max_steps: int | None = None,
    warmup_steps: int = 2,
    progress: Callable[[int], None] | None = None,
    on_step: Callable[[int], Any] | None = None,
    min_steps: int = 0,
    max_seconds: float = float("inf"),
    seen: set[tuple[Any, ...]] | None = None,
    lead_steps: int = 0,
    agree: Callable[[bool], bool] | None = None,
) -> StepTimes:
    """Run `step` on batches from `batches` for about `seconds` (after warm-up), timing each.

    The loss is fetched every step: that waits for the accelerator, so a step's compute time
    is really the accelerator's, and the time in `next()` is really input wait. Steps whose
    input shapes were not seen before compile (XLA) and are never timed.

    Args:
        warmup_steps: untimed steps first (also when their shapes were seen).
        on_step: given each timed step's index, returns a context (a profiler trace) or None.
        min_steps: time at least this many steps, even past `seconds`...
        max_seconds: ...but stop timing after this long (`stopped_early` says so).
        seen: input shapes already compiled (shared by the rounds of a measurement).
        lead_steps: untimed, uncounted steps first (a pipeline refilling its buffers settles).
        agree: given whether this worker would stop, whether any worker stops
            (`device.workers_agree`): synchronous workers must run the same steps, or one
            waits for the others' all-reduce forever.
    """
    times = StepTimes()
    seen = set() if seen is None else seen
    per_call = int(getattr(step, "batches_per_call", 1))  # a model's steps_per_execution
    start = None
    began = time.perf_counter()
    index = 0
    while True:
        now = time.perf_counter()
        counted = bool(max_steps) and index >= (max_steps or 0)
        if start is None:  # every batch has a new shape: nothing is timed without compiling
            stop = now - began > 10 * seconds + 120
        else:
            elapsed = now - start
            stop = counted or elapsed >= max_seconds or (elapsed >= seconds and index >= min_steps)
        if agree is not None:
            stop = agree(stop)
        if stop:
            times.stopped_early = start is not None and not counted and index < min_steps
            break
        t0 = time.perf_counter()
        try:
            group, waits = _next_batches(batches, per_call)
        except StopIteration:
            break
        t1 = time.perf_counter()
        batch = group[0] if per_call == 1 else tuple(group)
        signatures = {_signature(b) for b in group}
        # a call compiles only for a batch shape it has not seen
        timed = times.warmup_steps >= warmup_steps and signatures <= seen and lead_steps <= 0
        seen |= signatures
        context = on_step(index) if timed and on_step else None
        if context is not None:
            with context:
                loss = float(step(batch))
        else:
            loss = float(step(batch))
        t2 = time.perf_counter()
        if lead_steps > 0:
            lead_steps -= per_call
            continue
        if not timed:
            times.warmup_steps += per_call
            continue
        if start is None:
            start = t0
        times.add_call(waits, t2 - t1, sum(batch_size_of(b) for b in group))
        if not times.losses:
            times.losses.append(loss)
        index += per_call
        if progress:
            progress(per_call)
    if times.losses:
        times.losses.append(loss)
    return times
