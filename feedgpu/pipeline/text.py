"""Text batching: bucket boundaries chosen from the manifest's exact length counts, and blocks
of parsed examples turned into padded, bucketed or packed batches with attention masks.

Everything but choosing boundaries runs in-graph inside tf.data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from feedgpu.pipeline.epochs import BUCKET_WINDOW, blocks_per_group, numbered, run_epochs
from feedgpu.pipeline.readers import keyed_shuffle

if TYPE_CHECKING:
    from feedgpu.pipeline.spec import PipelineSpec


def choose_boundaries(
    length_counts: Sequence[Sequence[int]],
    max_length: int,
    max_buckets: int = 16,
    multiple: int = 8,
    target_waste: float = 0.10,
) -> list[int]:
    """The fewest bucket upper bounds whose padding is at most target_waste of the batch.

    Each distinct shape costs an XLA compilation, so buckets are added only while they pay:
    for each bucket count, dynamic programming over the distinct (rounded) lengths finds the
    bounds with the least padding ((bound - length) summed over examples); the first count
    reaching target_waste wins, else the best with max_buckets. Bounds are multiples of
    `multiple`, at most max_length.
    """
    counts: dict[int, int] = {}
    for length, n in length_counts:
        rounded = min(max_length, -(-int(length) // multiple) * multiple)
        counts[rounded] = counts.get(rounded, 0) + int(n)
    values = sorted(counts)
    if not values:
        return [max_length]
    m, k = len(values), min(max_buckets, len(values))
    prefix_n, prefix_sum = [0], [0]
    for v in values:
        prefix_n.append(prefix_n[-1] + counts[v])
        prefix_sum.append(prefix_sum[-1] + counts[v] * v)

    def cost(i: int, j: int) -> int:  # padding when values[i..j] share bound values[j]
        return values[j] * (prefix_n[j + 1] - prefix_n[i]) - (prefix_sum[j + 1] - prefix_sum[i])

    inf = float("inf")
    best = [[inf] * m for _ in range(k + 1)]
    cut = [[0] * m for _ in range(k + 1)]
    best[1] = [cost(0, j) for j in range(m)]
    for b in range(2, k + 1):
        for j in range(m):
            for i in range(b - 1, j + 1):
                c = best[b - 1][i - 1] + cost(i, j)
                if c < best[b][j]:
                    best[b][j], cut[b][j] = c, i
    bounds: list[int] = []
    for b in range(1, k + 1):
        bounds, j, left = [], m - 1, b
        while left >= 1 and j >= 0:
            bounds.append(values[j])
            j = cut[left][j] - 1 if left > 1 else -1
            left -= 1
        bounds.sort()
        if padding_waste(length_counts, bounds) <= target_waste:
            break
    return bounds


def padding_waste(length_counts: Sequence[Sequence[int]], bounds: Sequence[int]) -> float:
    """Share of padded positions when each example is padded to the first bound >= its length."""
    padded = real = 0
    for length, n in length_counts:
        bound = next((b for b in bounds if b >= length), bounds[-1])
        kept = min(int(length), bound)
        real += kept * int(n)
        padded += bound * int(n)
    return 1 - real / padded if padded else 0.0


def text_batches(
    plan: Any,
    source: Any,
    spec: PipelineSpec,
    labelled: bool,
    pack: int | None,
    seed: int,
    count: int | None,
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

    packed = spec.text_mode == "packed"
    width = int(pack) if packed and pack else spec.max_length
    keep = ("input_ids", "segment_ids", "positions") if packed else ("input_ids",)
    bounds = tf.constant(sorted({*spec.bucket_boundaries, width}), tf.int64)
    size = spec.batch_size
    shuffle = spec.shuffle_buffer > 0
    group_blocks = blocks_per_group(spec)

    def columns(block: Any) -> Any:  # ragged rows -> a token buffer and row lengths
        ids = block["input_ids"]
        out = {"count": ids.nrows(), "lengths": ids.row_lengths()}
        out.update({k: block[k].flat_values for k in keep})
        if labelled:
            out["label"] = block["label"]
        return out

    def group(blocks: Any, seed: Any, wanted: Any) -> Any:  # [from, to) of its batches
        lengths = blocks["lengths"]  # [blocks, BLOCK], zero-padded
        span = tf.shape(blocks["input_ids"], tf.int64)[1]  # tokens per block, padded
        starts = tf.cumsum(lengths, axis=1, exclusive=True)
        starts += tf.range(tf.shape(lengths, tf.int64)[0])[:, None] * span
        real = tf.sequence_mask(blocks["count"], tf.shape(lengths)[1])
        rows = {"start": tf.boolean_mask(starts, real), "length": tf.boolean_mask(lengths, real)}
        if labelled:
            rows["label"] = tf.boolean_mask(blocks["label"], real)
        held = tf.size(rows["length"], tf.int64)
        order = tf.range(held)
        if shuffle:
            order = tf.random.experimental.stateless_shuffle(order, seed)
        if spec.text_mode == "bucket":  # sort by length within each window of batches
            window = tf.range(held) // (size * BUCKET_WINDOW)
            key = window * (width + 1) + tf.minimum(tf.gather(rows["length"], order), width)
            order = tf.gather(order, tf.argsort(key, stable=True))
        full = held // size
        in_batches = tf.reshape(order[: full * size], [full, size])
        if shuffle:  # batches sorted by length must not come in length order
            batches = tf.random.experimental.stateless_shuffle(tf.range(full), seed + 1)
            in_batches = tf.gather(in_batches, batches)
        # The token buffers are shared by the group's batches, not copied per batch.
        tokens = {k: tf.reshape(blocks[k], [-1]) for k in keep}

        def gather(rows_of: Any) -> Any:
            return {k: tf.gather(v, rows_of) for k, v in rows.items()}

        first = tf.clip_by_value(wanted[0], 0, full)
        ds = tf.data.Dataset.from_tensor_slices(
            gather(in_batches[first : tf.clip_by_value(wanted[1], first, full)])
        )
        if not spec.drop_remainder:  # the partial batch, if any and if kept
            rest = tf.data.Dataset.from_tensors(gather(order[full * size :]))
            kept = (wanted[0] <= full) & (full < wanted[1])
            ds = ds.concatenate(rest.filter(lambda b: (tf.size(b["length"]) > 0) & kept))
        return tf.data.Dataset.zip((ds, tf.data.Dataset.from_tensors(tokens).repeat()))

    def padded(batch: Any, tokens: Any) -> Any:
        length = batch["length"]
        kept = tf.minimum(length, width)
        if spec.text_mode == "bucket":
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
        batch_rows = size if spec.drop_remainder else None
        shape = [batch_rows, pad_to if isinstance(pad_to, int) else None]
        dense_shape = tf.stack([tf.size(kept, tf.int64), tf.cast(pad_to, tf.int64)])
        x = {}
        for k in keep:
            values = tf.RaggedTensor.from_row_lengths(
                tf.gather(tokens[k], index), kept, validate=False
            )
            pad = tf.constant(spec.pad_id if k == "input_ids" else 0, values.dtype)
            x[k] = tf.ensure_shape(values.to_tensor(pad, shape=dense_shape), shape)
        if packed:  # documents in a pack are told apart by segment; 0 marks padding
            mask = tf.cast(x["segment_ids"] > 0, tf.int32)
        else:
            mask = tf.sequence_mask(kept, pad_to, tf.int32)
        x["attention_mask"] = tf.ensure_shape(mask, shape)
        return (x, tf.ensure_shape(batch["label"], [batch_rows])) if labelled else x

    def epoch(key: Any, skip: Any) -> Any:
        blocks = source(key).map(columns)
        if shuffle:
            blocks = keyed_shuffle(blocks, group_blocks, key)
        groups = numbered(blocks.padded_batch(group_blocks), key, plan is not None, seed)
        end = tf.constant(count or tf.int64.max, tf.int64)

        def counted(before: Any, element: Any) -> Any:  # the epoch's batches before a group
            index, b = element
            held = tf.reduce_sum(b["count"])
            made = held // size if spec.drop_remainder else (held + size - 1) // size
            return before + made, (index, b, tf.stack([skip - before, end - before]))

        # Skipped and cut batches are left out inside their group, as row indices: no stage
        # per batch, and every group still read, so the blocks' cache sees its end (after a
        # `take`, tf.data would throw the cache away).
        groups = groups.scan(tf.constant(0, tf.int64), counted)
        seed_of = tf.constant(seed, tf.int64)
        return groups.flat_map(lambda i, b, wanted: group(b, tf.stack([seed_of, i]), wanted))

    ds = run_epochs(plan, epoch, spec, seed)
    return ds.map(padded, num_parallel_calls=tf.data.AUTOTUNE, deterministic=spec.deterministic)
