"""The pipeline builder against both converters' output: values, shapes, determinism, Keras."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import feedgpu
from feedgpu import DatasetError, PipelineSpec, TextOptions, UsageError
from feedgpu.pipeline.buckets import choose_boundaries, padding_waste
from feedgpu.pipeline.images import decode_crop_resize


@pytest.fixture(scope="module", params=[4, 1], ids=["blocks", "one-a-record"])
def text_data(
    request: pytest.FixtureRequest, text_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """conftest's text_data (blocks of 4), and the same corpus a document a record: every text
    pipeline test reads both layouts."""
    from conftest import convert_text_data

    if request.param == 4:
        return text_data  # the test run's, not converted again
    return convert_text_data(tmp_path_factory, docs_per_record=request.param)


def test_training_images_static_shapes_and_labels(image_data: Path) -> None:
    spec = PipelineSpec.for_dataset(
        str(image_data), batch_size=8, training=True, image_size=(32, 40), normalize=True
    )
    assert spec.drop_remainder and spec.shuffle_files and spec.cache == "memory"
    ds = feedgpu.build_pipeline(spec)
    assert ds.element_spec[0].shape.as_list() == [8, 32, 40, 3]  # static: XLA compiles once
    batches = list(ds)
    assert len(batches) == 36 // 8
    labels = np.concatenate([y.numpy() for _, y in batches])
    assert set(labels) <= {0, 1, 2} and len(labels) == 32
    images = np.concatenate([x.numpy() for x, _ in batches])
    assert abs(images.mean()) < 2 and images.std() > 0.1  # ImageNet-normalised


def test_eval_centre_crop_matches_a_manual_decode(image_data: Path) -> None:
    spec = PipelineSpec.for_dataset(
        str(image_data), batch_size=36, image_size=(16, 16), dtype="uint8", cycle_length=1
    )
    assert not spec.training and spec.shuffle_buffer == 0 and not spec.drop_remainder
    images, labels = next(iter(feedgpu.build_pipeline(spec)))
    parsed = list(feedgpu.read_dataset(spec))
    assert images.dtype == tf.uint8 and images.shape == (36, 16, 16, 3)
    ex = parsed[0]
    full = tf.io.decode_jpeg(ex["image"], channels=3)
    h, w = int(ex["height"]), int(ex["width"])
    side = int(min(h, w) * 0.875)
    crop = full[(h - side) // 2 : (h - side) // 2 + side, (w - side) // 2 : (w - side) // 2 + side]
    expected = tf.cast(
        tf.clip_by_value(tf.round(tf.image.resize(crop, (16, 16))), 0, 255), tf.uint8
    )
    assert np.abs(images[0].numpy().astype(int) - expected.numpy().astype(int)).max() <= 2
    assert int(labels[0]) == int(ex["label"])


def test_same_seed_same_batches_other_seed_differs(image_data: Path) -> None:
    def first(seed: int) -> np.ndarray:
        spec = PipelineSpec.for_dataset(
            str(image_data), batch_size=6, training=True, image_size=(24, 24), seed=seed
        )
        return next(iter(feedgpu.build_pipeline(spec)))[0].numpy()

    np.testing.assert_array_equal(first(3), first(3))
    assert not np.array_equal(first(3), first(4))


def test_text_pad_and_bucket_shapes_and_padding(text_data: Path) -> None:
    pad = PipelineSpec.for_dataset(str(text_data), batch_size=4, training=True, seed=0)
    x, y = next(iter(feedgpu.build_pipeline(pad)))
    assert x["input_ids"].shape == (4, pad.max_length) and y.shape == (4,)
    assert (x["attention_mask"].numpy() == (x["input_ids"].numpy() != 0)).all()
    bucket = pad.with_changes(text_mode="bucket")
    shapes, real, padded = set(), 0, 0
    for x, _ in feedgpu.build_pipeline(bucket):
        shapes.add(x["input_ids"].shape[1])
        real += int(x["attention_mask"].numpy().sum())
        padded += x["input_ids"].numpy().size
    assert shapes <= set(bucket.bucket_boundaries) and len(shapes) > 1
    pad_total = 0
    for x, _ in feedgpu.build_pipeline(pad):
        pad_total += x["input_ids"].numpy().size
    assert padded < pad_total / 2  # bucketing cuts padding on this skewed corpus
    assert 1 - real / padded < 0.35


def test_tokenizer_identity_is_enforced(text_data: Path) -> None:
    spec = PipelineSpec.for_dataset(str(text_data), tokenizer_identity="0" * 64)
    with pytest.raises(DatasetError, match="tokenized by tokenizer"):
        feedgpu.build_pipeline(spec)


def test_input_context_shards_are_disjoint_and_cover(image_data: Path) -> None:
    spec = PipelineSpec.for_dataset(str(image_data), batch_size=1, image_size=(8, 8))
    seen = []
    for i in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=i)
        seen.append({bytes(e["path"].numpy()) for e in feedgpu.read_dataset(spec, ctx)})
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 36


def test_cache_auto_decision_follows_the_budget(image_data: Path) -> None:
    size = feedgpu.read_manifest(str(image_data)).to_json()["splits"]["train"]["num_bytes"]
    assert PipelineSpec.for_dataset(str(image_data), ram_budget_bytes=size * 4).cache == "memory"
    assert PipelineSpec.for_dataset(str(image_data), ram_budget_bytes=size).cache is None


def test_spec_json_round_trip_and_validation(image_data: Path) -> None:
    spec = PipelineSpec.for_dataset(str(image_data), batch_size=16, training=True)
    again = PipelineSpec.from_json(spec.to_json())
    assert again == spec
    assert "cache = 'memory'  # split is" in str(spec)
    with pytest.raises(UsageError, match="dtype 'int7'"):
        spec.with_changes(dtype="int7")
    with pytest.raises(UsageError, match="unknown PipelineSpec field"):
        PipelineSpec.for_dataset(str(image_data), batch=3)
    with pytest.raises(DatasetError, match="no split 'test'"):
        PipelineSpec.for_dataset(str(image_data), split="test")


def test_keras_trains_on_the_pipeline(image_data: Path) -> None:
    spec = PipelineSpec.for_dataset(
        str(image_data), batch_size=8, training=True, image_size=(16, 16)
    )
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input((16, 16, 3)),
            tf.keras.layers.Conv2D(4, 3, activation="relu"),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(3),
        ]
    )
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(feedgpu.build_pipeline(spec), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()


def test_boundaries_minimise_padding() -> None:
    counts = [[10, 500], [12, 300], [100, 50], [500, 5]]
    bounds = choose_boundaries(counts, 512, max_buckets=3)
    assert bounds == [16, 104, 504]
    assert padding_waste(counts, bounds) < padding_waste(counts, [512]) / 4


def test_ignore_errors_drops_only_the_damaged_record_and_counts_it(
    image_data: Path, tmp_path: Path
) -> None:
    import shutil

    from feedgpu.format.records import read_records

    image_data = Path(shutil.copytree(image_data, tmp_path / "damaged"))  # the shared one stays
    shard = sorted(image_data.glob("*.tfrecord-*"))[0]
    with open(shard, "rb") as f:
        n = len(list(read_records(f)))
    data = bytearray(shard.read_bytes())
    data[40] ^= 0xFF  # inside the first record's payload: its length header stays intact
    shard.write_bytes(bytes(data))
    strict = PipelineSpec.for_dataset(str(image_data), batch_size=1, cache=None)
    with pytest.raises(tf.errors.DataLossError):
        list(feedgpu.read_dataset(strict))
    tolerant = strict.with_changes(ignore_errors=True)
    before = feedgpu.dropped_records(tolerant)
    paths = [e["path"] for e in feedgpu.read_dataset(tolerant)]
    assert len(paths) == 36 - 1 and n > 1  # the rest of that shard is still read
    assert feedgpu.dropped_records(tolerant) - before == 1


def test_distribute_datasets_from_function(image_data: Path) -> None:
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    spec = PipelineSpec.for_dataset(str(image_data), batch_size=4, image_size=(8, 8))

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return feedgpu.build_pipeline(spec, ctx)  # it divides the batch among the replicas

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    total = sum(int(strategy.experimental_local_results(y)[0].shape[0]) for _, y in dist)
    assert total == 36


def test_pad_truncation_keeps_the_closing_token_and_packed_passes_through(
    tmp_path: Path, text_data: Path, text_folder: Path
) -> None:
    spec = PipelineSpec.for_dataset(str(text_data), batch_size=80, max_length=8, cycle_length=1)
    x, _ = next(iter(feedgpu.build_pipeline(spec)))
    rows = [e["input_ids"].numpy().tolist() for e in feedgpu.read_dataset(spec)]
    for got, ids in zip(x["input_ids"].numpy().tolist(), rows, strict=True):
        want = ids if len(ids) <= 8 else [*ids[:7], ids[-1]]
        assert got == want + [0] * (8 - len(want))
    packed = tmp_path / "packed"
    feedgpu.convert_text(
        str(text_folder),
        str(packed),
        TextOptions(tokenizer="train:wordpiece:300", pack=32),
        quiet=True,
    )
    pspec = PipelineSpec.for_dataset(str(packed), batch_size=4, training=True)
    assert pspec.text_mode == "packed"
    batch = next(iter(feedgpu.build_pipeline(pspec)))
    assert batch["input_ids"].shape == (4, 32)
    assert (batch["attention_mask"].numpy() == (batch["segment_ids"].numpy() > 0)).all()


def test_fewest_buckets_that_meet_the_padding_target() -> None:
    counts = [[n, 100] for n in range(8, 513, 8)]  # uniform lengths: many buckets needed
    bounds = choose_boundaries(counts, 512)
    assert padding_waste(counts, bounds) <= 0.10
    fewer = choose_boundaries(counts, 512, max_buckets=len(bounds) - 1)
    assert padding_waste(counts, fewer) > 0.10  # one bucket less would miss the target
    assert choose_boundaries([[20, 1000]], 512) == [24]  # one length, one bucket


def test_bucketing_keeps_every_example_once_with_its_ids(text_data: Path) -> None:
    spec = PipelineSpec.for_dataset(str(text_data), batch_size=4, text_mode="pad")

    def rows(s: PipelineSpec) -> list[tuple[tuple[int, ...], int]]:
        out = []
        for x, y in feedgpu.build_pipeline(s):
            for ids, mask, label in zip(
                x["input_ids"].numpy(), x["attention_mask"].numpy(), y.numpy(), strict=True
            ):
                out.append((tuple(int(i) for i, m in zip(ids, mask, strict=True) if m), int(label)))
        return sorted(out)

    bucketed = spec.with_changes(text_mode="bucket")
    assert rows(bucketed) == rows(spec)  # same examples, same ids, whatever the bucket
    widths = {x["input_ids"].shape[1] for x, _ in feedgpu.build_pipeline(bucketed)}
    assert widths <= set(bucketed.bucket_boundaries) | {bucketed.max_length}


def _text_rows(ds: tf.data.Dataset) -> list[tuple[tuple[int, ...], int]]:
    """Every row of every batch as (its real ids, its label)."""
    out = []
    for x, y in ds:
        for ids, mask, label in zip(
            x["input_ids"].numpy(), x["attention_mask"].numpy(), y.numpy(), strict=True
        ):
            out.append((tuple(int(i) for i in ids[mask == 1]), int(label)))
    return out


def test_text_training_shuffles_each_epoch_and_drops_different_examples(text_data: Path) -> None:
    spec = PipelineSpec.for_dataset(
        str(text_data), batch_size=7, training=True, text_mode="bucket", seed=7
    )
    everything = spec.with_changes(training=False, shuffle_buffer=0, drop_remainder=False)
    every = sorted(_text_rows(feedgpu.build_pipeline(everything)))
    ds = feedgpu.build_pipeline(spec)
    first, second = _text_rows(ds), _text_rows(ds)
    for epoch in (first, second):  # whole batches of distinct examples, none invented
        assert len(epoch) == len(every) // 7 * 7
        assert len(set(epoch)) == len(epoch) and set(epoch) <= set(every)
    assert first != second  # a new order every epoch
    assert first == _text_rows(feedgpu.build_pipeline(spec))  # the seed pins it
    assert first != _text_rows(feedgpu.build_pipeline(spec.with_changes(seed=8)))
    assert len(every) % 7  # so drop_remainder leaves some out: not always the same ones
    left_out = [frozenset(set(every) - set(_text_rows(ds))) for _ in range(4)]
    assert len(set(left_out)) > 1


def test_text_eval_and_ignore_errors_deliver_every_example(text_data: Path) -> None:
    spec = PipelineSpec.for_dataset(str(text_data), batch_size=7, max_length=16)
    assert not spec.drop_remainder and spec.shuffle_buffer == 0
    expected = []
    for e in feedgpu.read_dataset(spec):
        ids = tuple(int(i) for i in e["input_ids"].numpy())
        expected.append((ids if len(ids) <= 16 else (*ids[:15], ids[-1]), int(e["label"])))
    got = _text_rows(feedgpu.build_pipeline(spec))
    assert sorted(got) == sorted(expected) and len(expected) > 7
    assert sorted(
        _text_rows(feedgpu.build_pipeline(spec.with_changes(ignore_errors=True)))
    ) == sorted(expected)


def test_flipping_the_crop_before_resizing_mirrors_the_output(image_data: Path) -> None:
    spec = PipelineSpec.for_dataset(str(image_data))
    example = next(iter(feedgpu.read_dataset(spec)))
    window = tf.stack(
        [0, 0, tf.cast(example["height"], tf.int32), tf.cast(example["width"], tf.int32)]
    )
    plain = decode_crop_resize(example["image"], window, (20, 30), tf.constant(False)).numpy()
    flipped = decode_crop_resize(example["image"], window, (20, 30), tf.constant(True)).numpy()
    assert plain.std() > 1  # a real image, not a blank one
    np.testing.assert_allclose(flipped, plain[:, ::-1], atol=1e-3)
