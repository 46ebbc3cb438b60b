"""An epoch's length is known in advance (Keras shows it and ends the epoch without a warning),
it is never more than the pipeline yields, and a batch larger than the split is refused."""

from __future__ import annotations

import warnings

import pytest
import tensorflow as tf

import feedgpu
from feedgpu import ImageOptions, PipelineSpec, TextOptions, UsageError
from feedgpu.samples import write_sample_images


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("epochs-images")
    write_sample_images(str(root / "src"), num_classes=3, images_per_class=12)
    feedgpu.convert_images(
        str(root / "src"), str(root / "out"), ImageOptions(num_shards=4), quiet=True
    )
    return str(root / "out")


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> str:
    """700 one-line documents of 1-12 words: three blocks of records, the last one partial."""
    root = tmp_path_factory.mktemp("epochs-text")
    words = ["the", "cat", "sat", "on", "mat", "dog", "ran", "far"]
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words]))
    (root / "src").mkdir()
    lines = [" ".join(words[(i + j) % 8] for j in range(1 + i % 12)) for i in range(700)]
    (root / "src" / "docs.txt").write_text("\n".join(lines) + "\n")
    options = TextOptions(tokenizer=str(root / "vocab.txt"), doc_per_line=True, num_shards=3)
    feedgpu.convert_text(str(root / "src"), str(root / "out"), options, quiet=True)
    return str(root / "out")


def epoch_sizes(ds: tf.data.Dataset, epochs: int = 2) -> list[int]:
    return [sum(1 for _ in ds) for _ in range(epochs)]


@pytest.mark.parametrize(("training", "batch", "expected"), [(True, 8, 4), (False, 8, 5)])
def test_image_epochs_are_exact(images: str, training: bool, batch: int, expected: int) -> None:
    spec = PipelineSpec.for_dataset(images, batch_size=batch, training=training, image_size=16)
    ds = feedgpu.build_pipeline(spec)
    assert int(ds.cardinality()) == expected
    assert epoch_sizes(ds) == [expected, expected]


@pytest.mark.parametrize("mode", ["pad", "bucket"])
@pytest.mark.parametrize(("training", "batch"), [(True, 8), (True, 50), (False, 50)])
def test_text_epochs_never_promise_more_than_they_yield(
    texts: str, mode: str, training: bool, batch: int
) -> None:
    spec = PipelineSpec.for_dataset(
        texts, batch_size=batch, training=training, text_mode=mode, shuffle_buffer=300, seed=1
    )
    ds = feedgpu.build_pipeline(spec)
    count = int(ds.cardinality())
    # assert_cardinality raises if an epoch yields fewer; take() cuts one that yields more
    assert epoch_sizes(ds, 3) == [count] * 3
    rows = sum(int(x["attention_mask"].shape[0]) for x in ds)
    if training:  # at most one batch a group below what dropping remainders leaves
        assert rows >= 700 - 2 * batch * 2
    else:  # evaluation: every document, once
        assert rows == 700


def test_a_batch_larger_than_the_split_is_refused(images: str) -> None:
    spec = PipelineSpec.for_dataset(images, batch_size=64, training=True)
    with pytest.raises(UsageError, match=r"batch_size 64 with drop_remainder: .* 36 examples"):
        feedgpu.build_pipeline(spec)
    evaluation = PipelineSpec.for_dataset(images, batch_size=64)
    assert int(feedgpu.build_pipeline(evaluation).cardinality()) == 1


def test_keras_ends_each_epoch_without_running_out_of_data(images: str) -> None:
    spec = PipelineSpec.for_dataset(images, batch_size=8, training=True, image_size=16)
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input((16, 16, 3)),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(3),
        ]
    )
    model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(feedgpu.build_pipeline(spec), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    assert not [w for w in caught if "ran out of data" in str(w.message)]
