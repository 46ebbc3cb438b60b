"""`InputPosition`: where a training run is in its input, a few bytes that resume it exactly.

A pipeline built with a position is a pure function of (seed, epoch, batch): the file order,
the shuffle and every augmentation draw are keyed by the seed and the epoch (`epochs.
epoch_plan`), so an epoch can be replayed from any batch by skipping the records before it,
before anything is decoded. The position is therefore just "batches consumed" plus a
fingerprint of the pipeline and dataset it belongs to: no shuffle buffer, no cache, no reader
offsets. It checkpoints with `tf.train.Checkpoint(..., input=position)` like any other state.

Imports TensorFlow (a trackable needs it); reached only through lazy imports.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from feedgpu.errors import UsageError
from feedgpu.pipeline.epochs import epoch_batches, host_cut
from feedgpu.pipeline.split_view import SplitView, per_replica, view_split
from feedgpu.tf_private import trackable_base

if TYPE_CHECKING:
    from feedgpu.pipeline.spec import PipelineSpec

# Spec fields that change speed or where the pipeline runs, never which batches it yields.
_NOT_IN_ORDER = frozenset(
    {"data_dir", "ram_budget_bytes", "autotune", "prefetch_to_device", "reasons"}
)


def pipeline_fingerprint(spec: PipelineSpec, view: SplitView) -> str:
    """A short hash of everything that decides a pipeline's batches: the dataset (its conversion
    fingerprint and the split's shards), the spec's ordering fields and this host's share."""
    fields = {k: v for k, v in asdict(spec).items() if k not in _NOT_IN_ORDER}
    key = {
        "dataset": view.dataset_fingerprint,
        "shards": list(view.shards),
        "spec": fields,
        "host": view.host,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _refusal(spec: PipelineSpec) -> str | None:
    """Why a pipeline with this spec cannot be resumed exactly, or None."""
    if spec.seed is None:
        return "it has no seed (set PipelineSpec seed=..., e.g. seed=0)"
    if not spec.deterministic:
        return "deterministic=False lets parallel stages reorder elements"
    if spec.service:
        return "tf.data service workers share out the files among themselves"
    if spec.ignore_errors:
        return "ignore_errors skips an unknown number of damaged records"
    return None


# Saved through its own tensors, so that reading a checkpoint can refuse another pipeline's.
_Trackable: Any = trackable_base()


class InputPosition(_Trackable):
    """Batches a training run has consumed from one pipeline: save it, resume there exactly.

    Build the pipeline with it (`build_pipeline(spec, position=position)`); every new iterator
    over that pipeline starts at the position, and the training loop calls `advance()` after
    each step. Saved by `tf.train.Checkpoint(..., input=position)` as two small tensors (the
    count and the fingerprint of the pipeline it belongs to); restoring a checkpoint of another
    seed, spec or dataset raises UsageError instead of resuming the wrong data.

    Raises:
        UsageError: the spec cannot be resumed exactly (no seed, deterministic=False, tf.data
            service, ignore_errors, repeat without drop_remainder), or the epoch's batch
            count is not known.
    """

    def __init__(self, spec: PipelineSpec, input_context: Any = None) -> None:
        why = _refusal(spec)
        if why:
            raise UsageError(f"this pipeline cannot be resumed exactly: {why}")
        spec = per_replica(spec, input_context)
        view = view_split(spec, input_context)
        count = epoch_batches(spec, view)
        if not count:
            raise UsageError(f"the {spec.split!r} split gives this pipeline no batches to resume")
        self.batches_per_epoch = count
        # Images repeated run on as one stream of examples, their batches straddling epochs.
        self._straddle = spec.kind == "image" and spec.repeat
        self._batch_size = spec.batch_size
        self._examples = host_cut(spec, view, count) or view.num_examples  # an image epoch
        self._unit = spec.batch_size if spec.kind == "image" else 1  # what an epoch skips
        self._per_step = view.replicas  # batches a step takes: one a replica this pipeline feeds
        self.fingerprint = pipeline_fingerprint(spec, view)
        with tf.init_scope(), tf.device("/cpu:0"):
            self._batches = tf.Variable(0, dtype=tf.int64, trainable=False, name="batches")

    def check(self, spec: PipelineSpec, view: SplitView) -> None:
        """Refuse to position a pipeline this position was not made for.

        Raises:
            UsageError: another spec, dataset or input context.
        """
        if self.fingerprint != pipeline_fingerprint(spec, view):
            raise UsageError(
                "this InputPosition was made for another spec, dataset or input context: make "
                "it with InputPosition(spec, input_context) for the pipeline it positions"
            )

    @property
    def batches(self) -> int:
        """Batches consumed since the run began (over all epochs)."""
        return int(self._batches.numpy())

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self.batches // self.batches_per_epoch

    @property
    def step(self) -> int:
        """The next batch's index within its epoch."""
        return self.batches % self.batches_per_epoch

    def advance(self, batches: int | None = None) -> Any:
        """Count a training step's batches as consumed (call after each step; works in
        tf.function): one a replica this pipeline feeds, unless `batches` says otherwise."""
        return self._batches.assign_add(self._per_step if batches is None else batches)

    def reset(self, batches: int = 0) -> None:
        """Move to a batch count (0: the start of the run)."""
        self._batches.assign(batches)

    def start(self) -> tuple[Any, Any]:
        """Where an iterator starting now begins, as tensors read when it starts: the epoch,
        and what to skip of it (images: examples; text: batches)."""
        batches = self._batches.read_value()
        if self._straddle:
            offset = batches * self._batch_size
            return offset // self._examples, offset % self._examples
        epoch, step = batches // self.batches_per_epoch, batches % self.batches_per_epoch
        return epoch, step * self._unit

    def _serialize_to_tensors(self) -> dict[str, Any]:
        return {"batches": self._batches.read_value(), "fingerprint": tf.constant(self.fingerprint)}

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> Any:
        saved = restored_tensors["fingerprint"].numpy().decode()
        if saved != self.fingerprint:
            raise UsageError(
                f"the checkpoint's input position belongs to another pipeline (fingerprint "
                f"{saved}, this one {self.fingerprint}): seed, spec or dataset changed; "
                "rebuild the pipeline as it was, or start the run afresh in a new directory"
            )
        return self._batches.assign(restored_tensors["batches"])

    def __repr__(self) -> str:
        return (
            f"InputPosition(epoch={self.epoch}, step={self.step}, "
            f"batches_per_epoch={self.batches_per_epoch}, fingerprint={self.fingerprint})"
        )
