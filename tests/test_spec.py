"""PipelineSpec takes each field's value or says, in one line, what the field takes; settings
that cannot apply to the dataset are refused, not ignored."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

import feedgpu
from feedgpu import PipelineSpec, UsageError
from feedgpu.pipeline.spec_checks import TAKES
from feedgpu.samples import write_sample_images

# A value of the wrong type for each kind of field.
WRONG = {
    "an int": "64",
    "an int or None": "7",
    "True or False": "yes",
    "a number in (0, 1]": "half",
}


def wrong_value(name: str) -> object:
    takes = TAKES[name][0]
    if takes in WRONG:
        return WRONG[takes]
    if "pair" in takes:
        return "wide"
    if "list" in takes:
        return "8,16"
    return 3  # the text fields


def test_every_field_checks_its_type_in_one_line() -> None:
    assert set(TAKES) == {f.name for f in fields(PipelineSpec)} - {"reasons"}
    for name in TAKES:
        value = wrong_value(name)
        with pytest.raises(UsageError) as caught:
            PipelineSpec(**{"data_dir": "d", name: value})  # type: ignore[arg-type]
        message = str(caught.value)
        assert message.startswith(f"{name} {value!r}: takes "), message
        assert "\n" not in message


def test_values_are_normalised() -> None:
    spec = PipelineSpec("d", image_size=224, crop_area=[0.1, 1], bucket_boundaries=[8, 16])
    assert spec.image_size == (224, 224) and spec.crop_area == (0.1, 1)
    assert spec.bucket_boundaries == (8, 16)
    with pytest.raises(UsageError, match=r"^batch_size True: takes an int$"):
        PipelineSpec("d", batch_size=True)
    with pytest.raises(UsageError, match="a bare word is taken for a typo"):
        PipelineSpec("d", cache="mem")
    assert PipelineSpec("d", cache="/tmp/feedgpu-cache/train").cache == "/tmp/feedgpu-cache/train"


def test_spec_json_with_a_wrong_type_is_one_line() -> None:
    with pytest.raises(UsageError, match=r"^batch_size '64': takes an int$"):
        PipelineSpec.from_json('{"data_dir": "d", "batch_size": "64"}')


@pytest.fixture(scope="module")
def image_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("spec")
    write_sample_images(str(root / "src"), num_classes=2, images_per_class=4)
    feedgpu.convert_images(str(root / "src"), str(root / "out"), quiet=True)
    return str(root / "out")


def test_for_dataset_takes_a_square_size_and_refuses_what_cannot_apply(
    image_dataset: str,
) -> None:
    assert PipelineSpec.for_dataset(image_dataset, image_size=64).image_size == (64, 64)
    with pytest.raises(UsageError, match=r"^kind='text': .* holds images \(kind='image'\)$"):
        PipelineSpec.for_dataset(image_dataset, kind="text")
    with pytest.raises(UsageError, match=r"^text_mode: for text datasets only"):
        PipelineSpec.for_dataset(image_dataset, text_mode="bucket")
    with pytest.raises(feedgpu.DatasetError, match=r"has no split 'test' \(it has train\)"):
        PipelineSpec.for_dataset(image_dataset, split="test")
    printed = str(PipelineSpec.for_dataset(image_dataset))
    assert "image_size" in printed and "text_mode" not in printed and "pad_id" not in printed


def test_text_settings_must_match_how_text_was_stored(tmp_path: Path) -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "on", "mat"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("the cat sat on the mat\nthe cat\n")
    made = {}
    for name, extra in (("plain", {}), ("packed", {"pack": 8})):
        options = feedgpu.TextOptions(tokenizer=str(tmp_path / "vocab.txt"), doc_per_line=True)
        feedgpu.convert_text(
            str(tmp_path / "src"),
            str(tmp_path / name),
            feedgpu.TextOptions(**{**options.__dict__, **extra}),
            quiet=True,
        )
        made[name] = str(tmp_path / name)
    with pytest.raises(UsageError, match=r"text_mode='bucket': .* is packed into sequences of 8"):
        PipelineSpec.for_dataset(made["packed"], text_mode="bucket")
    with pytest.raises(UsageError, match=r"text_mode='packed': .* was not packed"):
        PipelineSpec.for_dataset(made["plain"], text_mode="packed")
    with pytest.raises(UsageError, match=r"^image_size: for image datasets only"):
        PipelineSpec.for_dataset(made["plain"], image_size=64)
    printed = str(PipelineSpec.for_dataset(made["plain"]))
    assert "text_mode" in printed and "image_size" not in printed and "crop_area" not in printed
