"""In-graph image transforms: a fused JPEG decode-and-crop planned from the stored height and
width, flips, resizing, the late cast; and the map that batches decoded images with labels."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from feedgpu.pipeline.measure_hooks import StageChanges
    from feedgpu.pipeline.spec import PipelineSpec

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


def decode_crop_resize(
    encoded: Any, window: Any, image_size: tuple[int, int], flip: Any = None
) -> Any:
    """Decode only the window of a JPEG (other formats: decode, then crop), resize to size.

    `flip` (a boolean tensor) mirrors the image left-right. It is done on the decoded uint8
    crop, before resizing (the two commute): a uint8 crop is far fewer bytes to reverse than
    the float32 output (benchmarks/RESULTS.md).
    """
    import tensorflow as tf

    def jpeg() -> Any:
        return tf.image.decode_and_crop_jpeg(encoded, window, channels=3)

    def other() -> Any:
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        return tf.image.crop_to_bounding_box(image, window[0], window[1], window[2], window[3])

    image = tf.cond(tf.io.is_jpeg(encoded), jpeg, other)
    image.set_shape([None, None, 3])
    if flip is not None:
        image = tf.cond(flip, lambda: tf.reverse(image, [1]), lambda: image)
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


def image_batches(ds: Any, spec: PipelineSpec, stages: StageChanges, seed: int) -> Any:
    """Decoded, cropped, resized image batches with their labels, from (index, example) pairs:
    each example's augmentation is keyed by the seed and its index (`epochs.example_epoch`), so
    it is the same whenever that example is replayed, and different every epoch."""
    import tensorflow as tf

    from feedgpu.pipeline.measure_hooks import delayed

    augment = spec.training and "augment" not in stages.skip
    parallel = {"num_parallel_calls": tf.data.AUTOTUNE, "deterministic": spec.deterministic}

    def transform(index: Any, example: Any) -> Any:
        key = tf.stack([tf.constant(seed, tf.int64), index])
        window = crop_window(
            example["height"],
            example["width"],
            augment,
            key,
            spec.eval_crop_fraction,
            spec.crop_area,
            spec.crop_aspect,
        )
        flip = None
        if augment and spec.random_flip:
            flip = tf.random.stateless_uniform([], key + 1) < 0.5
        if "decode" in stages.skip:  # a free decode: its injected delay goes with it
            image = tf.zeros([*spec.image_size, 3])
        else:
            image = decode_crop_resize(example["image"], window, spec.image_size, flip)
            image = delayed(image, stages.delay("decode"))
        return finish_image(image, spec.dtype, spec.normalize), example["label"]

    return ds.map(transform, **parallel).batch(
        spec.batch_size,
        drop_remainder=spec.drop_remainder,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=spec.deterministic,
    )
