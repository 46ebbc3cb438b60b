"""Every private TensorFlow API feedgpu uses, in one place, each with why no public one serves.

A TensorFlow upgrade may remove any of them: `tests/test_tf_private.py` checks each is still
there and names the function here to mend when one is gone. Nothing else in feedgpu reaches
into TensorFlow's private names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def runtime_initialized() -> bool:
    """Whether TensorFlow has created its runtime (after which GPU memory policy and visible
    devices can no longer change).

    Public APIs only tell by failing: `tf.config.experimental.set_memory_growth` raises once the
    runtime exists, and trying it would apply the change when it does not.
    """
    import sys

    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    return context.context()._context_handle is not None


def sleep_dataset(seconds: float) -> Any:
    """A dataset transformation sleeping before each element, in C++ (no GIL, so the delay is
    what was asked even when Python threads are busy).

    TensorFlow's own test helper; a public `map` with `tf.py_function` holds the GIL and runs
    late when Python threads are busy, which skews the stalls measurement injects. Only where
    the consumer's own `next()` runs it: an iterator destroyed while a background thread is in
    this op can deadlock in its cancellation.
    """
    from tensorflow.python.data.experimental.ops import testing

    return testing.sleep(int(seconds * 1e6))


def all_layers(model: Any) -> list[Any]:
    """Every layer a Keras model holds, nested ones included (a composite layer's own).

    Keras 3 lists only a model's direct layers publicly (`model.layers`); a token embedding
    inside a composite layer (keras-hub's TokenAndPositionEmbedding) is found only this way.
    """
    return list(model._flatten_layers(include_self=False))


def stop_server(server: Any) -> None:
    """Stop a tf.data service dispatcher or worker.

    `DispatchServer`/`WorkerServer` expose `join()` (forever) but no public stop; without it a
    server started in a process lives until the process ends.
    """
    server._stop()


def worker_address(server: Any) -> str:
    """The host:port a tf.data service worker serves at (its port is chosen at start when 0).

    `WorkerServer` has no public address property (a `DispatchServer` has `target`).
    """
    return str(server._address)


def trackable_base() -> Any:
    """The base class of objects `tf.train.Checkpoint` saves through their own tensors
    (`_serialize_to_tensors` / `_restore_from_tensors`), as TensorFlow's lookup tables do.

    A `tf.Module` would save its variables but could not check, while a checkpoint is read,
    that the saved state belongs to this object (`InputPosition` refuses another pipeline's).
    """
    import tensorflow as tf

    return tf.__internal__.tracking.Trackable


def trace_step(index: int) -> Any:
    """A profiler step marker for training step `index`: `Trace(..., _r=1)` is the private
    flag that makes the TensorBoard profiler's step-time graph see it as a step (what
    Keras's own TensorBoard callback passes)."""
    import tensorflow as tf

    return tf.profiler.experimental.Trace("train", step_num=index, _r=1)


@contextlib.contextmanager
def graph_seed_cleared() -> Iterator[None]:
    """The current graph's seed (`tf.random.set_seed`) cleared while random ops are made.

    tf.data pairs an op seed with the graph-level seed: a script that sets it, or not, would see
    another order (and a graph seed of 0 breaks a tensor op seed). TensorFlow has no public way
    to make one op ignore the graph seed; the graph's `seed` attribute (through `tf.compat.v1`)
    is what it reads.
    """
    import tensorflow as tf

    graph = tf.compat.v1.get_default_graph()
    saved, graph.seed = graph.seed, None
    try:
        yield
    finally:
        graph.seed = saved


def xspace() -> Any:
    """An empty `XSpace` message, to parse a profiler trace (`*.xplane.pb`) into.

    The profiler writes its traces in this protocol buffer; TensorFlow ships its generated
    class under `tensorflow.tsl` but exports no public name for it, and the tensorboard
    plugin that reads it is another (heavy) package.
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    return xplane_pb2.XSpace()
