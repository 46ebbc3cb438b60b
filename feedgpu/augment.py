"""In-graph example transforms: fused JPEG decode-and-crop, flips, resizing, text batching.

Everything here runs inside `tf.data` maps, so it is parallel and overlapped with training; the
only work done in Python is choosing bucket boundaries from the manifest's length counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
    length_counts: Sequence[Sequence[int]], max_length: int, max_buckets: int = 8, multiple: int = 8
) -> list[int]:
    """Bucket upper bounds that minimise padding for this length distribution.

    Dynamic programming over the distinct (rounded) lengths: the padding of a bucket is
    (bound - length) summed over its examples; at most `max_buckets` buckets (each distinct
    shape costs an XLA compilation). Bounds are multiples of `multiple` and at most max_length.
    """
    counts: dict[int, int] = {}
    for length, n in length_counts:
        rounded = min(max_length, -(-int(length) // multiple) * multiple)
        counts[rounded] = counts.get(rounded, 0) + int(n)
    values = sorted(counts)
    if not values:
        return [max_length]
    k = min(max_buckets, len(values))
    # cost[i][j]: padding when values[i..j] share bound values[j]
    prefix_n = [0]
    prefix_sum = [0]
    for v in values:
        prefix_n.append(prefix_n[-1] + counts[v])
        prefix_sum.append(prefix_sum[-1] + counts[v] * v)

    def cost(i: int, j: int) -> int:
        n = prefix_n[j + 1] - prefix_n[i]
        return values[j] * n - (prefix_sum[j + 1] - prefix_sum[i])

    inf = float("inf")
    m = len(values)
    best = [[inf] * m for _ in range(k + 1)]
    cut = [[0] * m for _ in range(k + 1)]
    for j in range(m):
        best[1][j] = cost(0, j)
    for b in range(2, k + 1):
        for j in range(m):
            for i in range(b - 1, j + 1):
                c = best[b - 1][i - 1] + cost(i, j)
                if c < best[b][j]:
                    best[b][j], cut[b][j] = c, i
    b = min(range(1, k + 1), key=lambda n: best[n][m - 1])
    bounds, j = [], m - 1
    while b >= 1 and j >= 0:
        bounds.append(values[j])
        j = cut[b][j] - 1 if b > 1 else -1
        b -= 1
    return sorted(set(bounds))


def padding_waste(length_counts: Sequence[Sequence[int]], bounds: Sequence[int]) -> float:
    """Share of padded positions when each example is padded to the first bound >= its length."""
    padded = real = 0
    for length, n in length_counts:
        bound = next((b for b in bounds if b >= length), bounds[-1])
        kept = min(int(length), bound)
        real += kept * int(n)
        padded += bound * int(n)
    return 1 - real / padded if padded else 0.0
