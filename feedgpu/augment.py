"""In-graph example transforms: fused JPEG decode-and-crop, flips, resizing, text batching.

Everything here runs inside `tf.data` maps, so it is parallel and overlapped with training; the
only work done in Python is choosing bucket boundaries from the manifest's length counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from feedgpu.pipeline import PipelineSpec
    from feedgpu.stages import StageChanges

# Batches per bucketing window: more sorts closer to the bucket bounds, and holds more in memory.
BUCKET_WINDOW = 16
# ImageNet channel statistics (0-255 scale): the normalisation most pretrained models expect.
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


def crop_window(
    height: Any,
    width: Any,
    training: bool,
    seed: Any,
    eval_fraction: float,
    area: tuple[float, float],
    aspect: tuple[float, float],
) -> Any:
    """[y, x, h, w] to decode: a random-resized crop for training, a centre crop otherwise.

    Planned from the stored height and width, so the JPEG is decoded only inside the window
    (`decode_and_crop_jpeg`): less work than decoding everything and cropping after.
    """
    import tensorflow as tf

    height = tf.cast(height, tf.int32)
    width = tf.cast(width, tf.int32)
    if training:
        shape = tf.stack([height, width, 3])
        box = tf.zeros([1, 0, 4], tf.float32)  # no hint box: the whole image
        common = {
            "min_object_covered": 0.0,
            "aspect_ratio_range": aspect,
            "area_range": area,
            "max_attempts": 10,
            "use_image_if_no_bounding_boxes": True,
        }
        if seed is None:
            begin, size, _ = tf.image.sample_distorted_bounding_box(shape, box, **common)
        else:
            begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
                shape, box, seed=seed, **common
            )
        return tf.stack([begin[0], begin[1], size[0], size[1]])
    side = tf.cast(tf.cast(tf.minimum(height, width), tf.float32) * eval_fraction, tf.int32)
    side = tf.maximum(side, 1)
    return tf.stack([(height - side) // 2, (width - side) // 2, side, side])


def decode_crop_resize(encoded: Any, window: Any, image_size: tuple[int, int]) -> Any:
    """Decode only the window of a JPEG (other formats: decode, then crop), resize to size."""
    import tensorflow as tf

    def jpeg() -> Any:
        return tf.image.decode_and_crop_jpeg(encoded, window, channels=3)

    def other() -> Any:
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        return tf.image.crop_to_bounding_box(image, window[0], window[1], window[2], window[3])

    image = tf.cond(tf.io.is_jpeg(encoded), jpeg, other)
    image.set_shape([None, None, 3])
    return tf.image.resize(image, image_size, method="bilinear", antialias=False)


def finish_image(image: Any, dtype: str, normalize: bool) -> Any:
    """Normalise (ImageNet statistics) and cast late: the cast is the last host-side op."""
    import tensorflow as tf

    if dtype == "uint8":
        return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
    if normalize:
        image = (image - tf.constant(IMAGENET_MEAN)) / tf.constant(IMAGENET_STD)
    return tf.cast(
        image, {"float32": tf.float32, "bfloat16": tf.bfloat16, "float16": tf.float16}[dtype]
    )


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


def image_batches(ds: Any, spec: PipelineSpec, stages: StageChanges) -> Any:
    """Decoded, cropped, resized image batches with their labels."""
    import tensorflow as tf

    from feedgpu.stages import delayed

    augment = spec.training and "augment" not in stages.skip

    def transform(example: Any, seed: Any) -> Any:
        crop_seed = seed if spec.seed is not None else None
        window = crop_window(
            example["height"],
            example["width"],
            augment,
            crop_seed,
            spec.eval_crop_fraction,
            spec.crop_area,
            spec.crop_aspect,
        )
        if "decode" in stages.skip:  # a free decode: its injected delay goes with it
            image = tf.zeros([*spec.image_size, 3])
        else:
            image = decode_crop_resize(example["image"], window, spec.image_size)
            image = delayed(image, stages.delay("decode"))
        if augment and spec.random_flip:
            if spec.seed is None:
                image = tf.image.random_flip_left_right(image)
            else:
                image = tf.image.stateless_random_flip_left_right(image, seed + 1)
        return finish_image(image, spec.dtype, spec.normalize), example["label"]

    # Per-example seeds from a seeded stream: reproducible, and different every epoch.
    seeds = tf.data.Dataset.random(seed=spec.seed or 0, rerandomize_each_iteration=True).batch(2)
    ds = tf.data.Dataset.zip((ds, seeds))
    ds = ds.map(transform, num_parallel_calls=tf.data.AUTOTUNE, deterministic=spec.deterministic)
    return ds.batch(
        spec.batch_size,
        drop_remainder=spec.drop_remainder,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=spec.deterministic,
    )


def text_batches(ds: Any, spec: PipelineSpec, labelled: bool, pack: int | None) -> Any:
    """Batches of ids with attention masks.

    Every mode batches first and then works on whole batches (one op per batch instead of
    one per example: per-example stages cost ~100 µs each here): "pad" pads to max_length,
    "packed" reshapes stored sequences, "bucket" sorts windows of batches by length and pads
    each batch to the smallest boundary that holds it.
    """
    import tensorflow as tf

    pad = tf.constant(spec.pad_id, tf.int64)
    length = spec.max_length

    def output(x: Any, label: Any) -> Any:
        return (x, label) if labelled else x

    if spec.text_mode == "packed":

        def packed(batch: Any) -> Any:  # every sequence is `pack` long: static shapes
            x = {
                k: tf.reshape(batch[k], [-1, pack])
                for k in ("input_ids", "segment_ids", "positions")
            }
            x["attention_mask"] = tf.cast(x["segment_ids"] > 0, tf.int32)
            return output(x, batch.get("label"))

        ds = ds.batch(spec.batch_size, drop_remainder=spec.drop_remainder)
        return ds.map(packed, num_parallel_calls=tf.data.AUTOTUNE)

    def padded(batch: Any, width: Any) -> Any:
        """Ragged ids to [B, width] with a mask; rows cut at width keep their last id (the
        closing special token)."""
        ids = batch["input_ids"]  # ragged [B, (n)]
        if isinstance(width, int):  # static: XLA sees one shape
            dense = ids.to_tensor(default_value=pad, shape=[None, width])
        else:  # a bucket's width: pad (or cut) to it
            dense = ids.to_tensor(default_value=pad)[:, :width]
            dense = tf.pad(
                dense, [[0, 0], [0, width - tf.shape(dense, tf.int64)[1]]], constant_values=pad
            )
        cut = tf.cast(width, tf.int64)
        over = tf.where(tf.cast(ids.row_lengths(), tf.int64) > cut)[:, 0]
        limits = tf.cast(ids.row_limits(), tf.int64)
        last = tf.gather(ids.flat_values, tf.gather(limits, over) - 1)
        where = tf.stack([over, tf.fill(tf.shape(over), cut - 1)], 1)
        dense = tf.tensor_scatter_nd_update(dense, where, last)
        x = {"input_ids": dense, "attention_mask": tf.cast(dense != pad, tf.int32)}
        return output(x, batch.get("label"))

    if spec.text_mode == "pad":
        ds = ds.ragged_batch(spec.batch_size, drop_remainder=spec.drop_remainder)
        return ds.map(lambda b: padded(b, length), num_parallel_calls=tf.data.AUTOTUNE)

    # Bucketing, batch first: windows of BUCKET_WINDOW batches are sorted by length and cut
    # into batches, each padded to the smallest boundary that holds its longest row. One op
    # per window and per batch instead of several per example (measured: per-example stages
    # cost ~100 µs each here). Batches are then shuffled, so lengths do not come in order.
    bounds = tf.constant(sorted({*spec.bucket_boundaries, length}), tf.int64)
    batch_size = spec.batch_size

    def split_window(window: Any) -> Any:
        window = {k: window[k] for k in keep}
        lengths = window["input_ids"].row_lengths()
        order = tf.argsort(tf.minimum(lengths, length), stable=True)
        window = {k: tf.gather(v, order) for k, v in window.items()}
        count = tf.size(lengths, tf.int64)
        batches = count // batch_size if spec.drop_remainder else -(-count // batch_size)

        def batch_at(i: Any) -> Any:
            return {k: v[i * batch_size : (i + 1) * batch_size] for k, v in window.items()}

        return tf.data.Dataset.range(batches).map(batch_at)

    def to_bucket(batch: Any) -> Any:
        longest = tf.cast(tf.reduce_max(batch["input_ids"].row_lengths()), tf.int64)
        longest = tf.minimum(longest, length)
        width = tf.gather(bounds, tf.searchsorted(bounds, tf.reshape(longest, [1])))[0]
        return padded(batch, width)

    keep = ("input_ids", "label") if labelled else ("input_ids",)
    ds = ds.ragged_batch(batch_size * BUCKET_WINDOW).flat_map(split_window)
    ds = ds.map(to_bucket, num_parallel_calls=tf.data.AUTOTUNE, deterministic=spec.deterministic)
    if spec.training:
        ds = ds.shuffle(BUCKET_WINDOW, seed=spec.seed)
    return ds
