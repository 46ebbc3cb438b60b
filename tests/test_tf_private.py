"""The private TensorFlow APIs feedgpu uses (feedgpu/tf_private.py) are still there.

A failure here after a TensorFlow upgrade names what went and which function to mend.
"""

from __future__ import annotations

import pytest


def _gone(what: str, function: str) -> str:
    import tensorflow as tf

    return f"TensorFlow {tf.__version__} no longer has {what}: mend feedgpu.tf_private.{function}"


def test_runtime_handle_is_there() -> None:
    from tensorflow.python.eager import context

    assert hasattr(context.context(), "_context_handle"), _gone(
        "context()._context_handle", "runtime_initialized"
    )
    import tensorflow as tf

    from feedgpu.tf_private import runtime_initialized

    tf.constant(1.0)
    assert runtime_initialized() is True


def test_sleep_dataset_is_there_and_sleeps_before_each_element() -> None:
    import tensorflow as tf

    try:
        from tensorflow.python.data.experimental.ops import testing
    except ImportError:
        pytest.fail(_gone("data.experimental.ops.testing", "sleep_dataset"))
    assert hasattr(testing, "sleep"), _gone("testing.sleep", "sleep_dataset")
    from feedgpu.tf_private import sleep_dataset

    ds = tf.data.Dataset.range(3).apply(sleep_dataset(0.001))
    assert [int(x) for x in ds] == [0, 1, 2]


def test_keras_lists_nested_layers() -> None:
    import keras

    inner = keras.Sequential([keras.layers.Embedding(10, 2)])
    model = keras.Sequential([keras.Input((3,)), inner, keras.layers.Flatten()])
    assert hasattr(model, "_flatten_layers"), _gone("keras Layer._flatten_layers", "all_layers")
    from feedgpu.tf_private import all_layers

    assert any(isinstance(layer, keras.layers.Embedding) for layer in all_layers(model))


def test_service_servers_stop_and_tell_their_address() -> None:
    import tensorflow as tf

    service = tf.data.experimental.service
    assert hasattr(service.DispatchServer, "_stop"), _gone("DispatchServer._stop", "stop_server")
    assert hasattr(service.WorkerServer, "_stop"), _gone("WorkerServer._stop", "stop_server")
    assert hasattr(service.WorkerServer, "_address"), _gone(
        "WorkerServer._address", "worker_address"
    )


def test_trackable_base_saves_and_restores_through_its_own_tensors(tmp_path) -> None:
    import tensorflow as tf

    from feedgpu.tf_private import trackable_base

    try:
        base = trackable_base()
    except AttributeError:
        pytest.fail(_gone("__internal__.tracking.Trackable", "trackable_base"))

    class Held(base):
        def __init__(self, value: int) -> None:
            self.value = value

        def _serialize_to_tensors(self) -> dict:
            return {"value": tf.constant(self.value)}

        def _restore_from_tensors(self, restored: dict) -> None:
            self.value = int(restored["value"].numpy())

    path = tf.train.Checkpoint(held=Held(7)).write(str(tmp_path / "held"))
    again = Held(0)
    tf.train.Checkpoint(held=again).read(path).assert_consumed()
    assert again.value == 7, _gone("the _serialize_to_tensors protocol", "trackable_base")


def test_graph_seed_cleared_makes_a_keyed_shuffle_ignore_set_seed() -> None:
    import tensorflow as tf

    from feedgpu.pipeline.keyed import keyed_shuffle

    def order(graph_seed: int | None) -> list[int]:
        if graph_seed is not None:
            tf.random.set_seed(graph_seed)
        try:  # inside a dataset function, as an epoch plan makes its shuffles: a graph
            ds = tf.data.Dataset.from_tensors(tf.constant(5, tf.int64)).flat_map(
                lambda key: keyed_shuffle(tf.data.Dataset.range(64), 64, key)
            )
            return [int(x) for x in ds]
        finally:
            tf.random.set_seed(None)

    unset = order(None)
    assert unset != list(range(64))  # shuffled at all
    assert order(1) == unset and order(2) == unset, _gone(
        "the graph's seed attribute", "graph_seed_cleared"
    )


def test_trace_step_marks_a_step_that_xspace_reads_back(tmp_path) -> None:
    """The step marker reaches the trace with the step's number and the `_r` flag that makes
    the profiler's step-time graph count it (the event is named "train" with or without it)."""
    import tensorflow as tf

    from feedgpu.bench.xplane import newest_planes
    from feedgpu.tf_private import trace_step

    tf.profiler.experimental.start(str(tmp_path))
    try:
        with trace_step(3):
            tf.reduce_sum(tf.ones([64, 64])).numpy()
    finally:
        tf.profiler.experimental.stop()
    try:
        planes = newest_planes(str(tmp_path))
    except ImportError:
        pytest.fail(_gone("tsl.profiler.protobuf.xplane_pb2", "xspace"))
    assert planes, "the profiler wrote no trace"
    marks = []
    for plane in planes:
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                if plane.event_metadata[event.metadata_id].name == "train":
                    marks.append({stat_names[s.metadata_id]: s.int64_value for s in event.stats})
    assert marks, "no train event in the trace"
    assert all(m.get("step_num") == 3 for m in marks)
    assert all(m.get("_r") == 1 for m in marks), _gone("Trace(..., _r=1)", "trace_step")
