"""How many batches an epoch holds, from the manifest's exact counts, so Keras knows the epoch
(a progress bar with a total; no "ran out of data" warning when an epoch ends).

Images: the examples this pipeline reads, divided by the batch size. Text is batched a group of
blocks at a time (see `text.text_batches`): all blocks are full but the last, and where training's
block shuffle puts that one changes how many batches its group yields by at most one, so the
epoch is cut to the smaller of the two possible counts (at most one batch a epoch, a different
one each epoch). Unknown (None) when records may be skipped (`ignore_errors`), epochs repeat, or
tf.data service workers share the files out among themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from feedgpu.errors import UsageError
from feedgpu.format.manifest import Manifest
from feedgpu.pipeline.readers import BLOCK

if TYPE_CHECKING:
    from feedgpu.pipeline.spec import PipelineSpec


def examples_read(spec: PipelineSpec, manifest: Manifest, input_context: Any = None) -> int:
    """Examples in the shard files this pipeline reads (its host's share, with a context)."""
    shards = manifest.split(spec.split, spec.data_dir).shards
    if input_context is not None and input_context.num_input_pipelines > 1:
        shards = shards[input_context.input_pipeline_id :: input_context.num_input_pipelines]
    return sum(s.num_examples for s in shards)


def _batches(examples: int, size: int, drop_remainder: bool) -> int:
    return examples // size if drop_remainder else -(-examples // size)


def batches_per_epoch(
    spec: PipelineSpec, manifest: Manifest, input_context: Any = None
) -> int | None:
    """Batches one epoch yields for sure (None: not known in advance).

    Raises:
        UsageError: with drop_remainder, the split makes no full batch (an epoch would be empty
            and `model.fit` would train on nothing without a word).
    """
    if spec.repeat or spec.ignore_errors or spec.service:  # service workers split the files
        return None
    n = examples_read(spec, manifest, input_context)
    size = spec.batch_size
    if spec.kind == "image":
        count = _batches(n, size, spec.drop_remainder)
    else:
        from feedgpu.pipeline.text import blocks_per_group

        per_group = blocks_per_group(spec)
        blocks = -(-n // BLOCK)
        last_block = n - (blocks - 1) * BLOCK if blocks else 0
        groups = -(-blocks // per_group)
        last_group = blocks - (groups - 1) * per_group  # blocks in the last group

        def total(partial_in_last_group: bool) -> int:
            sizes = [per_group * BLOCK] * (groups - 1) + [last_group * BLOCK]
            at = groups - 1 if partial_in_last_group or groups == 1 else 0
            sizes[at] -= BLOCK - last_block
            return sum(_batches(g, size, spec.drop_remainder) for g in sizes)

        count = total(True)  # unshuffled blocks: the partial one comes last
        if spec.shuffle_buffer:  # shuffled blocks: wherever it lands, at least this many
            count = min(count, total(False))
    if count == 0 and n:
        raise UsageError(
            f"batch_size {size} with drop_remainder: the {spec.split!r} split gives this "
            f"pipeline {n} examples, not one full batch; lower batch_size or set "
            "drop_remainder=False"
        )
    return count
