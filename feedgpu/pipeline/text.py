"""Text batching: blocks of parsed examples turned into padded, bucketed or packed batches with
attention masks, in-graph inside tf.data (the boundaries are chosen in `buckets`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from feedgpu.pipeline.buckets import BUCKET_WINDOW
from feedgpu.pipeline.epochs import blocks_per_group, run_epochs
from feedgpu.pipeline.keyed import keyed_shuffle, numbered

if TYPE_CHECKING:
    from feedgpu.pipeline.spec import PipelineSpec
    from feedgpu.pipeline.split_view import SplitView


def text_batches(
    plan: Any, source: Any, spec: PipelineSpec, view: SplitView, seed: int, count: int | None
) -> Any:
    """Batches of ids with attention masks, for the epochs `plan` holds ((key, skip) pairs,
    `epochs.epoch_plan`), from `source`, an epoch's blocks of parsed examples given its key.

    Text never becomes single examples: a tf.data stage costs more per element here than all
    of a text example's real work. Blocks are gathered into groups of about shuffle_buffer
    examples; each group's rows are permuted (the shuffle), sorted by length within windows
    of BUCKET_WINDOW batches when bucketing, and cut into batches whose order is permuted
    again. A batch is then gathered straight from the group's token buffer into its padded
    shape: max_length ("pad"), the stored length ("packed"), or the smallest bucket boundary
    holding its longest row ("bucket"). Rows longer than max_length keep their last id (the
    closing special token). Without drop_remainder each group ends in a partial batch; with
    it each group drops fewer than batch_size examples, at random, so all are seen over epochs.
    Every random draw is keyed by the epoch's key (block shuffle) and the group's index within
    the epoch (rows and batches), so an epoch replays from any batch: the skipped batches are
    dropped as row indices, before any padding is gathered; an epoch is cut to `count`.
    """
    import tensorflow as tf

    how = _Batching.of(spec, view)

    def epoch(key: Any, skip: Any) -> Any:
        blocks = source(key).map(how.columns)
        if how.shuffle:
            blocks = keyed_shuffle(blocks, how.group_blocks, key)
        groups = numbered(blocks.padded_batch(how.group_blocks), key, plan is not None, seed)
        end = tf.constant(count or tf.int64.max, tf.int64)

        def counted(before: Any, element: Any) -> Any:  # the epoch's batches before a group
            index, b = element
            held = tf.reduce_sum(b["count"])
            made = held // how.size if how.drop_remainder else (held + how.size - 1) // how.size
            return before + made, (index, b, tf.stack([skip - before, end - before]))

        # Skipped and cut batches are left out inside their group, as row indices: no stage
        # per batch, and every group still read, so the blocks' cache sees its end (after a
        # `take`, tf.data would throw the cache away).
        groups = groups.scan(tf.constant(0, tf.int64), counted)
        seed_of = tf.constant(seed, tf.int64)
        return groups.flat_map(lambda i, b, wanted: how.group(b, tf.stack([seed_of, i]), wanted))

    ds = run_epochs(plan, epoch, spec, seed)
    return ds.map(how.padded, num_parallel_calls=tf.data.AUTOTUNE, deterministic=spec.deterministic)


def text_columns(spec: PipelineSpec, view: SplitView) -> tuple[str, ...]:
    """The features batching reads (`readers.read_blocks`'s columns): no doc ids, whose
    parsing and caching cost more than their ids on short documents."""
    how = _Batching.of(spec, view)
    lengths = ("length",) if view.schema.blocks else ()  # a block's: its documents' lengths
    return (*how.keep, *lengths, *(("label",) if how.labelled else ()))


@dataclass(frozen=True)
class _Batching:
    """How a text pipeline cuts and pads its batches, and its three in-graph steps: a block's
    columns, a group's batches (as row indices), and a batch gathered into its padded shape.

    Attributes:
        mode: spec.text_mode ("pad", "bucket" or "packed").
        width: the longest row kept (max_length, or the pack length when packed).
        keep: the token features batched (packed text: segment ids and positions too).
        bounds: the bucket boundaries, width included, sorted.
        size: batch size.
        drop_remainder: each group's partial batch dropped.
        shuffle: rows, batches and blocks shuffled (spec.shuffle_buffer > 0).
        group_blocks: blocks gathered into one group.
        labelled: rows carry a label.
        pad_id: the id padding holds.
    """

    mode: str
    width: int
    keep: tuple[str, ...]
    bounds: tuple[int, ...]
    size: int
    drop_remainder: bool
    shuffle: bool
    group_blocks: int
    labelled: bool
    pad_id: int

    @classmethod
    def of(cls, spec: PipelineSpec, view: SplitView) -> _Batching:
        packed = spec.text_mode == "packed"
        width = int(view.pack_length) if packed and view.pack_length else spec.max_length
        return cls(
            mode=spec.text_mode,
            width=width,
            keep=("input_ids", "segment_ids", "positions") if packed else ("input_ids",),
            bounds=tuple(sorted({*spec.bucket_boundaries, width})),
            size=spec.batch_size,
            drop_remainder=spec.drop_remainder,
            shuffle=spec.shuffle_buffer > 0,
            group_blocks=blocks_per_group(spec),
            labelled=view.labelled,
            pad_id=spec.pad_id,
        )

    def columns(self, block: Any) -> Any:
        """Ragged rows (or blocks of documents' flat ids and lengths) -> a token buffer and
        row lengths."""
        import tensorflow as tf

        ids = block["input_ids"]
        if isinstance(ids, tf.RaggedTensor):
            out = {"count": ids.nrows(), "lengths": ids.row_lengths()}
            out.update({k: block[k].flat_values for k in self.keep})
        else:
            lengths = block["length"]
            out = {"count": tf.size(lengths, tf.int64), "lengths": lengths, "input_ids": ids}
        if self.labelled:
            out["label"] = block["label"]
        return out

    def group(self, blocks: Any, seed: Any, wanted: Any) -> Any:
        """A group's batches [wanted[0], wanted[1]), as row indices into its token buffer."""
        import tensorflow as tf

        size, width = self.size, self.width
        lengths = blocks["lengths"]  # [blocks, BLOCK], zero-padded
        span = tf.shape(blocks["input_ids"], tf.int64)[1]  # tokens per block, padded
        starts = tf.cumsum(lengths, axis=1, exclusive=True)
        starts += tf.range(tf.shape(lengths, tf.int64)[0])[:, None] * span
        real = tf.sequence_mask(blocks["count"], tf.shape(lengths)[1])
        rows = {"start": tf.boolean_mask(starts, real), "length": tf.boolean_mask(lengths, real)}
        if self.labelled:
            rows["label"] = tf.boolean_mask(blocks["label"], real)
        held = tf.size(rows["length"], tf.int64)
        order = tf.range(held)
        if self.shuffle:
            order = tf.random.experimental.stateless_shuffle(order, seed)
        if self.mode == "bucket":  # sort by length within each window of batches
            window = tf.range(held) // (size * BUCKET_WINDOW)
            key = window * (width + 1) + tf.minimum(tf.gather(rows["length"], order), width)
            order = tf.gather(order, tf.argsort(key, stable=True))
        full = held // size
        in_batches = tf.reshape(order[: full * size], [full, size])
        if self.shuffle:  # batches sorted by length must not come in length order
            batches = tf.random.experimental.stateless_shuffle(tf.range(full), seed + 1)
            in_batches = tf.gather(in_batches, batches)
        # The token buffers are shared by the group's batches, not copied per batch.
        tokens = {k: tf.reshape(blocks[k], [-1]) for k in self.keep}

        def gather(rows_of: Any) -> Any:
            return {k: tf.gather(v, rows_of) for k, v in rows.items()}

        first = tf.clip_by_value(wanted[0], 0, full)
        ds = tf.data.Dataset.from_tensor_slices(
            gather(in_batches[first : tf.clip_by_value(wanted[1], first, full)])
        )
        if not self.drop_remainder:  # the partial batch, if any and if kept
            rest = tf.data.Dataset.from_tensors(gather(order[full * size :]))
            kept = (wanted[0] <= full) & (full < wanted[1])
            ds = ds.concatenate(rest.filter(lambda b: (tf.size(b["length"]) > 0) & kept))
        return tf.data.Dataset.zip((ds, tf.data.Dataset.from_tensors(tokens).repeat()))

    def padded(self, batch: Any, tokens: Any) -> Any:
        """A batch's rows gathered from the token buffer into its padded shape."""
        import tensorflow as tf

        width = self.width
        length = batch["length"]
        kept = tf.minimum(length, width)
        if self.mode == "bucket":
            bounds = tf.constant(self.bounds, tf.int64)
            longest = tf.reshape(tf.reduce_max(kept), [1])
            pad_to = tf.gather(bounds, tf.searchsorted(bounds, longest))[0]
        else:  # a static width: XLA sees one shape
            pad_to = width
        start = batch["start"]
        index = tf.ragged.range(start, start + kept).flat_values
        # A row cut at `width` keeps its own last id (the closing special token).
        over = tf.where(length > kept)
        last = tf.gather_nd(tf.cumsum(kept), over) - 1
        index = tf.tensor_scatter_nd_update(
            index, last[:, None], tf.gather_nd(start + length - 1, over)
        )
        batch_rows = self.size if self.drop_remainder else None
        shape = [batch_rows, pad_to if isinstance(pad_to, int) else None]
        dense_shape = tf.stack([tf.size(kept, tf.int64), tf.cast(pad_to, tf.int64)])
        x = {}
        for k in self.keep:
            values = tf.RaggedTensor.from_row_lengths(
                tf.gather(tokens[k], index), kept, validate=False
            )
            pad = tf.constant(self.pad_id if k == "input_ids" else 0, values.dtype)
            x[k] = tf.ensure_shape(values.to_tensor(pad, shape=dense_shape), shape)
        if self.mode == "packed":  # documents in a pack are told apart by segment; 0: padding
            mask = tf.cast(x["segment_ids"] > 0, tf.int32)
        else:
            mask = tf.sequence_mask(kept, pad_to, tf.int32)
        x["attention_mask"] = tf.ensure_shape(mask, shape)
        if self.labelled:
            return x, tf.ensure_shape(batch["label"], [batch_rows])
        return x
