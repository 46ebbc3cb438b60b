"""bench-input on the user's own saved Keras model and on the user's own tf.data pipeline."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import keras
import numpy as np
import pytest
import tensorflow as tf

import feedgpu
from feedgpu.bench.device import DeviceConfig, DeviceSetup, resolve_devices
from feedgpu.bench.measure import BenchOptions, bench_input
from feedgpu.bench.render import render_report
from feedgpu.bench.schema import BENCH_REPORT_SCHEMA
from feedgpu.cli import main
from feedgpu.samples import write_sample_images

QUICK = {"seconds": 0.5, "ablation": "never", "quiet": True, "batch_size": 8}


@pytest.fixture(scope="module")
def setup() -> DeviceSetup:
    return resolve_devices(DeviceConfig(xla=False))  # XLA's compile time is not the question


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("user")
    write_sample_images(str(root / "src"), num_classes=3, images_per_class=16, sizes=((48, 40),))
    feedgpu.convert_images(str(root / "src"), str(root / "data"), quiet=True)
    return str(root / "data")


def _image_model(path: Path, size: int = 24, compiled: bool = True) -> str:
    inputs = keras.Input((size, size, 3), name="pixels")
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.Conv2D(4, 3)(x)
    outputs = keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(x))
    model = keras.Model(inputs, outputs, name="my_cnn")
    if compiled:
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.save(path)
    return str(path)


def test_a_saved_model_is_measured_with_its_own_step_at_its_own_image_size(
    tmp_path: Path, images: str, setup: DeviceSetup
) -> None:
    model = _image_model(tmp_path / "m.keras")
    report = bench_input(images, BenchOptions(model=model, **QUICK), setup=setup)
    assert report.model == "my_cnn (yours)" and report.kind == "image"
    assert report.spec is not None and report.spec.image_size == (24, 24)  # from the model
    assert report.ceiling.num_steps >= 5 and report.end_to_end.num_steps >= 5
    assert report.end_to_end.loss_last is not None
    assert report.ceiling.spread is not None and report.ceiling.spread.rounds == 5
    jsonschema.validate(report.to_json(), BENCH_REPORT_SCHEMA)
    text = render_report(report)
    assert "my_cnn (yours)" in text and "p10-p90" in text


def test_a_text_model_takes_its_inputs_by_name_and_its_length(
    tmp_path: Path, text_folder: Path, setup: DeviceSetup
) -> None:
    data = tmp_path / "text"
    options = feedgpu.TextOptions(tokenizer="train:wordpiece:300")  # unlabelled
    feedgpu.convert_text(str(text_folder), str(data), options, quiet=True)
    ids = keras.Input((16,), dtype="int32", name="input_ids")
    mask = keras.Input((16,), dtype="float32", name="attention_mask")
    x = keras.layers.Embedding(300, 8)(ids) * keras.ops.expand_dims(mask, -1)
    model = keras.Model([ids, mask], keras.layers.Dense(300)(x), name="my_lm")
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    report = bench_input(str(data), BenchOptions(model=model, **QUICK), setup=setup)
    assert report.spec is not None and report.spec.max_length == 16  # the model's length
    assert report.spec.text_mode == "pad" and report.model == "my_lm (yours)"
    assert report.end_to_end.loss_first is not None  # trained on its own ids as targets
    # A model built for a smaller vocabulary is refused in one line, before anything runs.
    small = keras.Model([ids, mask], keras.layers.Embedding(100, 4)(ids), name="too_small")
    small.compile("adam", "mse")
    vocab = feedgpu.read_manifest(str(data)).tokenizer.vocab_size
    with pytest.raises(feedgpu.UsageError, match=f"holds 100 ids; .* ids up to {vocab - 1}"):
        bench_input(str(data), BenchOptions(model=small, **QUICK), setup=setup)


def test_models_that_do_not_fit_get_one_line(
    tmp_path: Path, images: str, text_folder: Path, setup: DeviceSetup
) -> None:
    with pytest.raises(feedgpu.UsageError, match=r"not compiled: call model\.compile"):
        bench_input(
            images,
            BenchOptions(model=_image_model(tmp_path / "raw.keras", compiled=False), **QUICK),
            setup=setup,
        )
    with pytest.raises(feedgpu.UsageError, match="no such file"):
        bench_input(images, BenchOptions(model=str(tmp_path / "none.keras"), **QUICK), setup=setup)
    with pytest.raises(feedgpu.UsageError, match="gradient accumulation"):
        BenchOptions(model="m.keras", accumulate=2)
    with pytest.raises(feedgpu.UsageError, match=r"takes image_size=\(24, 24\)"):
        bench_input(
            images,
            BenchOptions(
                model=_image_model(tmp_path / "m.keras"),
                overrides={"image_size": (32, 32)},
                **QUICK,
            ),
            setup=setup,
        )
    data = tmp_path / "text"
    feedgpu.convert_text(
        str(text_folder),
        str(data),
        feedgpu.TextOptions(tokenizer="train:wordpiece:300"),
        quiet=True,
    )
    with pytest.raises(feedgpu.UsageError, match="the model wants inputs pixels"):
        bench_input(str(data), BenchOptions(model=_image_model(tmp_path / "i.keras"), **QUICK))

    @keras.saving.register_keras_serializable(package="feedgpu_test")
    class Doubled(keras.layers.Layer):
        def call(self, x: tf.Tensor) -> tf.Tensor:
            return 2 * x

    inputs = keras.Input((24, 24, 3))
    custom = keras.Model(inputs, keras.layers.Dense(3)(Doubled()(inputs)))
    custom.compile("sgd", "mse")
    custom.save(tmp_path / "custom.keras")
    keras.saving.get_custom_objects().clear()  # as in a process that never imported it
    with pytest.raises(
        feedgpu.UsageError, match=r"uses Doubled, which is not registered.*--import MODULE"
    ):
        bench_input(images, BenchOptions(model=str(tmp_path / "custom.keras"), **QUICK))


def _user_images(size: int = 24) -> tf.data.Dataset:
    x = np.random.default_rng(0).integers(0, 255, (64, size, size, 3), dtype=np.uint8)
    y = np.arange(64) % 3
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(8, drop_remainder=True).prefetch(2)


def test_your_own_dataset_alone_and_beside_feedgpus(
    tmp_path: Path, images: str, setup: DeviceSetup
) -> None:
    model = _image_model(tmp_path / "m.keras")
    yours = bench_input(
        dataset=_user_images(), options=BenchOptions(model=model, **QUICK), setup=setup
    )
    assert yours.data_dir == "your tf.data pipeline" and yours.spec is None
    assert yours.ablation is None and any("ablation needs a feedgpu" in n for n in yours.notes)
    assert yours.batch_size == 8 and yours.end_to_end.num_steps >= 5
    jsonschema.validate(yours.to_json(), BENCH_REPORT_SCHEMA)
    both = bench_input(
        images, BenchOptions(model=model, **QUICK), dataset=_user_images(), setup=setup
    )
    assert both.compared is not None and both.compared.data_dir == images
    text = render_report(both)
    # one ceiling, and feedgpu's batches built to the user's: 24x24 uint8, 8 a batch
    assert "side by side on my_cnn (yours), one compute ceiling" in text
    assert "both at 24x24 uint8, batch 8:" in text and "feedgpu's batches:" not in text
    assert both.compared.ran_with == both.ran_with
    assert not any("ablation needs a feedgpu" in n for n in both.notes)  # DATA was given
    assert both.to_json()["compared"]["ran_with"]["image_size"] == [24, 24]
    builtin = bench_input(dataset=_user_images(32), options=BenchOptions(**QUICK), setup=setup)
    assert builtin.model == "cnn-small" and builtin.kind == "image"
    with pytest.raises(feedgpu.UsageError, match="applies to feedgpu's pipeline"):
        bench_input(dataset=_user_images(), options=BenchOptions(overrides={"cache": "memory"}))
    with pytest.raises(feedgpu.UsageError, match="takes 24x24 images"):
        bench_input(dataset=_user_images(32), options=BenchOptions(model=model, **QUICK))


def test_cli_dataset_fn_and_refusals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "my_input.py").write_text(
        "import numpy as np, tensorflow as tf\n"
        "def make():\n"
        "    x = np.zeros((32, 24, 24, 3), np.uint8)\n"
        "    y = np.arange(32) % 3\n"
        "    return tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()\n"
        "def wrong():\n"
        "    return [1, 2]\n"
    )
    monkeypatch.chdir(tmp_path)
    model = _image_model(tmp_path / "m.keras")
    common = ["--seconds", "0.5", "--no-memory-growth", "--no-xla", "--quiet"]
    assert main(["bench-input", "--dataset-fn", "my_input:make", "--model", model, *common]) == 0
    out = capsys.readouterr().out
    assert "your tf.data pipeline" in out and "verdict" in out
    assert main(["bench-input", "--dataset-fn", "my_input:wrong", *common]) == 2
    assert "returned list, not a tf.data.Dataset" in capsys.readouterr().err
    assert main(["bench-input", "--dataset-fn", "nomodule:make", *common]) == 2
    assert "cannot import nomodule" in capsys.readouterr().err
    code = main(["bench-input", "--model", model, "--precision", "float32", *common])
    assert code == 2 and "keeps the dtype policy" in capsys.readouterr().err


def test_a_model_xla_cannot_compile_is_measured_without_it_and_says_so(images: str) -> None:
    class HostSide(keras.layers.Layer):
        """An op XLA has no kernel for: the step must fall back to no XLA."""

        def call(self, x: tf.Tensor) -> tf.Tensor:
            doubled = tf.numpy_function(lambda a: a * 2, [x], tf.float32)
            return tf.ensure_shape(doubled, x.shape)

    inputs = keras.Input((24, 24, 3))
    x = HostSide()(keras.layers.Rescaling(1 / 255)(inputs))
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Flatten()(x)), name="host")
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    report = bench_input(
        images, BenchOptions(model=model, **QUICK), setup=resolve_devices(DeviceConfig(xla=True))
    )
    assert any("does not compile with XLA" in note for note in report.notes), report.notes
    assert report.end_to_end.num_steps >= 5 and "note: the model's train step" in render_report(
        report
    )
