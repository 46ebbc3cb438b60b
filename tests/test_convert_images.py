"""`feedgpu convert images`: round trips through TFDS and tf.data, and the layouts users have."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from PIL import Image

from feedgpu import (
    DatasetError,
    ImageOptions,
    InputError,
    UsageError,
    convert_images,
    read_manifest,
)
from feedgpu.format.records import decode_example, read_records


def read_examples(out: Path) -> dict[str, dict]:
    """path -> parsed example, over every shard."""
    examples = {}
    for shard in sorted(out.glob("*.tfrecord-*")):
        with open(shard, "rb") as f:
            for record in read_records(f):
                ex = decode_example(record)
                examples[ex["path"][0].decode()] = ex
    return examples


def test_round_trip_through_tfds_keeps_jpeg_bytes_and_labels(
    tmp_path: Path, image_folder: Path
) -> None:
    out = tmp_path / "out"
    report = convert_images(str(image_folder), str(out), workers=2, quiet=True)
    assert report.num_examples == 36 and report.num_skipped == 0
    builder = tfds.builder_from_directory(str(out))
    names = builder.info.features["label"].names
    assert names == ["cat", "dog", "fox"]
    ds = builder.as_dataset(split="train")
    seen = 0
    for ex in ds:
        rel = ex["path"].numpy().decode()
        assert names[int(ex["label"])] == rel.split("/")[0]
        source = np.asarray(Image.open(image_folder / rel).convert("RGB"))
        assert ex["image"].shape == source.shape
        assert (int(ex["height"]), int(ex["width"])) == source.shape[:2]
        seen += 1
    assert seen == 36
    images, labels = next(iter(builder.as_dataset(split="train", as_supervised=True, batch_size=4)))
    assert images.dtype == tf.uint8 and labels.shape == (4,)
    for rel, ex in read_examples(out).items():  # passthrough: the very bytes of the file
        assert ex["image"][0] == (image_folder / rel).read_bytes()


def test_plain_tfrecord_dataset_parses_with_manifest_spec(
    tmp_path: Path, image_folder: Path
) -> None:
    out = tmp_path / "out"
    convert_images(str(image_folder), str(out), workers=1, quiet=True)
    manifest = read_manifest(str(out)).to_json()
    files = [str(out / s["file"]) for s in manifest["splits"]["train"]["shards"]]
    spec = {
        f["name"]: tf.io.FixedLenFeature([], tf.string if f["dtype"] == "string" else tf.int64)
        for f in manifest["features"]
    }
    parsed = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(files)]
    assert len(parsed) == 36 == manifest["splits"]["train"]["num_examples"]
    decoded = tf.io.decode_jpeg(parsed[0]["image"])
    assert decoded.shape[:2] == (int(parsed[0]["height"]), int(parsed[0]["width"]))


def test_split_folders_lossless_png_pixels_and_tfds_splits(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for split in ("train", "val", "test"):
        for cls in ("a", "b"):
            (src / split / cls / "deep").mkdir(parents=True)
            for i in range(3):
                arr = np.random.default_rng(hash((split, cls, i)) % 2**32).integers(
                    0, 256, (9, 13, 3)
                )
                Image.fromarray(arr.astype(np.uint8)).save(src / split / cls / "deep" / f"{i}.png")
    out = tmp_path / "out"
    report = convert_images(str(src), str(out), ImageOptions(lossless=True), workers=2, quiet=True)
    assert report.examples_by_split == {"train": 6, "validation": 6, "test": 6}
    builder = tfds.builder_from_directory(str(out))
    assert set(builder.info.splits) == {"train", "validation", "test"}
    for ex in builder.as_dataset(split="validation"):
        rel = ex["path"].numpy().decode()
        assert rel.startswith("val/")
        source = np.asarray(Image.open(src / rel).convert("RGB"))
        np.testing.assert_array_equal(ex["image"].numpy(), source)  # lossless: exact pixels


def test_every_bad_input_is_skipped_with_its_reason(tmp_path: Path, nasty_folder: Path) -> None:
    from conftest import NASTY_EXPECTED

    out = tmp_path / "out"
    report = convert_images(str(nasty_folder), str(out), workers=2, quiet=True)
    lines = (out / "skipped.jsonl").read_text().splitlines()
    skipped = {json.loads(line)["path"]: json.loads(line) for line in lines}
    converted = read_examples(out)
    for rel, reason in NASTY_EXPECTED.items():
        if reason is None:
            assert rel in converted, f"{rel} should convert"
        else:
            assert skipped.get(rel, {}).get("reason") == reason, f"{rel}: {skipped.get(rel)}"
    assert report.num_examples + report.num_skipped == len(NASTY_EXPECTED)
    assert read_manifest(str(out)).to_json()["skipped"]["truncated"] == 1
    # Everything stored decodes as 3-channel images with the dimensions recorded beside it.
    for rel, ex in converted.items():
        img = Image.open(io.BytesIO(ex["image"][0]))
        assert (img.height, img.width) == (ex["height"][0], ex["width"][0]), rel
        assert img.convert("RGB").mode == "RGB"
    assert converted["good/plain.jpg"]["image"][0] == (nasty_folder / "good/plain.jpg").read_bytes()
    assert converted["good/grey.jpg"]["image"][0] == (nasty_folder / "good/grey.jpg").read_bytes()
    # EXIF orientation 6 is applied: 60x40 becomes 40 wide, 60 high.
    assert (
        converted["good/rotated.jpg"]["height"][0],
        converted["good/rotated.jpg"]["width"][0],
    ) == (60, 40)
    # 16-bit 40000 scales to 156 rather than clipping to 255.
    sixteen = np.asarray(Image.open(io.BytesIO(converted["good/sixteen.png"]["image"][0])))
    assert abs(int(sixteen.mean()) - 40000 // 256) <= 2
    # Alpha is composited on white: half-transparent pixels get lighter, never black.
    alpha = np.asarray(Image.open(io.BytesIO(converted["good/alpha.png"]["image"][0])))
    plain = np.asarray(Image.open(nasty_folder / "good/plain.jpg"))
    assert alpha.mean() > plain.mean()


def test_strict_stops_at_first_bad_file_and_leaves_no_partial_shard(
    tmp_path: Path, image_folder: Path
) -> None:
    from feedgpu import InputError

    (image_folder / "cat" / "zzz_truncated.jpg").write_bytes(
        (image_folder / "cat" / "00000.jpg").read_bytes()[:300]
    )
    out = tmp_path / "out"
    with pytest.raises(InputError, match=r"cat/zzz_truncated.jpg: truncated.*--strict"):
        convert_images(
            str(image_folder),
            str(out),
            ImageOptions(num_shards=2),
            workers=2,
            strict=True,
            quiet=True,
        )
    assert not (out / "feedgpu.json").exists()
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]


def test_decompression_bomb_limit_is_configurable(tmp_path: Path, image_folder: Path) -> None:
    out, options = tmp_path / "out", ImageOptions(max_pixels=3000)
    # 64x48 = 3072 and 80x60 = 4800 pixels exceed 3000; 48x64 too: all skipped, none decoded,
    # which a run refuses to call a dataset unless told to keep it.
    with pytest.raises(InputError, match="kept 0 of 36 inputs: 36 skipped as 'decompression"):
        convert_images(str(image_folder), str(out), options, quiet=True)
    report = convert_images(str(image_folder), str(out), options, quiet=True, allow_skips=True)
    assert report.skipped_by_reason == {"decompression bomb": 36}
    # Over twice the limit too, the reason names the limit given (not Pillow's twice it).
    options = ImageOptions(max_pixels=1000)
    report = convert_images(str(image_folder), str(tmp_path / "o2"), options, quiet=True,
                            allow_skips=True)  # fmt: skip
    details = [json.loads(line)["detail"] for line in (tmp_path / "o2/skipped.jsonl").open()]
    assert len(details) == 36 and all("over the 1000 limit" in d for d in details), details[:2]


def test_labels_file_for_flat_folder(tmp_path: Path, image_folder: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    rows = []
    for i, p in enumerate(sorted(image_folder.rglob("*.jpg"))):
        (flat / f"img_{i:03d}.jpg").write_bytes(p.read_bytes())
        if i != 5:  # one image without a label
            rows.append({"file_name": f"./img_{i:03d}.jpg", "category": p.parent.name})
    rows.append({"file_name": "gone.jpg", "category": "cat"})
    csv_file = tmp_path / "labels.csv"
    csv_file.write_text(
        "file_name,category\n" + "".join(f"{r['file_name']},{r['category']}\n" for r in rows)
    )
    jsonl_file = tmp_path / "labels.jsonl"
    jsonl_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    outs = []
    for i, labels in enumerate((csv_file, jsonl_file)):
        out = tmp_path / f"out{i}"
        report = convert_images(
            str(flat),
            str(out),
            ImageOptions(split="train=0.75,validation=0.25"),
            labels_file=str(labels),
            quiet=True,
        )
        assert report.num_examples == 35
        assert report.skipped_by_reason == {"missing file": 1, "no label": 1}
        assert set(report.examples_by_split) == {"train", "validation"}
        outs.append(out)
    assert read_manifest(str(outs[0])).to_json()["label_names"] == ["cat", "dog", "fox"]
    shards0 = sorted(p.name for p in outs[0].glob("*tfrecord*"))
    assert [(outs[0] / n).read_bytes() for n in shards0] == [
        (outs[1] / n).read_bytes() for n in shards0
    ]


def test_hash_split_is_stable_and_refused_with_split_folders(
    tmp_path: Path, image_folder: Path
) -> None:
    opts = ImageOptions(split="train=0.5,validation=0.5")
    a = convert_images(str(image_folder), str(tmp_path / "a"), opts, quiet=True)
    b = convert_images(str(image_folder), str(tmp_path / "b"), opts, quiet=True)
    assert a.examples_by_split == b.examples_by_split
    assert 8 <= a.examples_by_split["train"] <= 28
    with pytest.raises(UsageError, match=r"add up to 0\.9"):
        convert_images(
            str(image_folder),
            str(tmp_path / "d"),
            ImageOptions(split="train=0.5,validation=0.4"),
            quiet=True,
        )
    (image_folder.parent / "splitted" / "train").mkdir(parents=True)
    image_folder.rename(image_folder.parent / "splitted" / "train" / "x")
    with pytest.raises(UsageError, match="drop --split"):
        convert_images(str(image_folder.parent / "splitted"), str(tmp_path / "c"), opts, quiet=True)


def test_max_size_shrinks_long_side(tmp_path: Path, image_folder: Path) -> None:
    out = tmp_path / "out"
    convert_images(str(image_folder), str(out), ImageOptions(max_size=32), quiet=True)
    for ex in read_examples(out).values():
        img = Image.open(io.BytesIO(ex["image"][0]))
        assert max(img.size) == 32 and img.size == (ex["width"][0], ex["height"][0])


def test_rerun_is_noop_and_changed_options_need_overwrite(
    tmp_path: Path, image_folder: Path
) -> None:
    out = tmp_path / "out"
    convert_images(str(image_folder), str(out), quiet=True)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert convert_images(str(image_folder), str(out), quiet=True).already_done
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    with pytest.raises(DatasetError, match=r"options differ \(quality 95 -> 80\).*--overwrite"):
        convert_images(str(image_folder), str(out), ImageOptions(quality=80), quiet=True)
    report = convert_images(
        str(image_folder),
        str(out),
        ImageOptions(quality=80, num_shards=3),
        overwrite=True,
        quiet=True,
    )
    assert not report.already_done and report.num_shards == 3
    assert len(list(out.glob("*.tfrecord-*"))) == 3


def test_refuses_foreign_nonempty_output(tmp_path: Path, image_folder: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    with pytest.raises(DatasetError, match="not empty and is not a feedgpu dataset"):
        convert_images(str(image_folder), str(out), quiet=True)
    assert (out / "thesis.tex").read_text() == "precious"


def test_dash_in_name_is_sanitised_for_tfds(tmp_path: Path, image_folder: Path) -> None:
    out = tmp_path / "out"
    convert_images(str(image_folder), str(out), ImageOptions(name="my-photos v2"), quiet=True)
    assert read_manifest(str(out)).to_json()["name"] == "my_photos_v2"
    assert len(list(tfds.builder_from_directory(str(out)).as_dataset(split="train"))) == 36


def test_a_class_a_split_misses_and_a_single_class_are_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from feedgpu.samples import write_sample_images

    src = tmp_path / "src"
    write_sample_images(str(src), num_classes=2, images_per_class=12, sizes=((24, 16),))
    (src / "owl").mkdir()
    (src / "dog" / "00000.jpg").rename(src / "owl" / "only.jpg")  # one image: in one split
    split = ImageOptions(split="train=0.5,validation=0.5", seed=0)
    with caplog.at_level("WARNING", logger="feedgpu.converters.image_checks"):
        convert_images(str(src), str(tmp_path / "out"), split, quiet=True)
    said = [r.getMessage() for r in caplog.records if "holds no image of" in r.getMessage()]
    assert len(said) == 1 and "holds no image of 1 class(es): 'owl'" in said[0], said
    caplog.clear()
    one = tmp_path / "one"
    (one / "cats").mkdir(parents=True)
    for image in list((src / "cat").iterdir())[:4]:
        image.rename(one / "cats" / image.name)
    with caplog.at_level("WARNING", logger="feedgpu.converters.image_checks"):
        convert_images(str(one), str(tmp_path / "o1"), quiet=True)
    assert "one class only ('cats')" in caplog.text


def test_images_that_change_during_the_run_are_skipped_or_said(
    tmp_path: Path, image_folder: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    from feedgpu.converters import images

    files = sorted(image_folder.rglob("*.jpg"))
    real_plan, real_process = images.plan_image_dataset, images.ImageProcessor.process

    def plan(*args, **kwargs):  # listed, then truncated before it is read
        made = real_plan(*args, **kwargs)
        files[0].write_bytes(files[0].read_bytes()[:100])
        return made

    def process(self, item):  # read, then written to
        out = real_process(self, item)
        if item[1] == str(files[1]):
            with open(files[1], "ab") as f:
                f.write(b"more")
        return out

    monkeypatch.setattr(images, "plan_image_dataset", plan)
    monkeypatch.setattr(images.ImageProcessor, "process", process)
    with caplog.at_level("WARNING", logger="feedgpu.converters.image_checks"):
        report = convert_images(str(image_folder), str(tmp_path / "out"), quiet=True, workers=1)
    assert report.skipped_by_reason == {"changed during conversion": 1}
    assert "2 image(s) changed while the conversion ran" in caplog.text
