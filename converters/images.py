"""Image folders to examples: valid JPEGs byte for byte, everything else normalised by Pillow.

Layouts: class per sub-folder (optionally under train/validation/test), or a flat folder with a
CSV/JSONL label file. Each example holds the encoded image, label, relative path, height, width.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from feedgpu import storage
from feedgpu.convert.gc_freeze import heap_frozen
from feedgpu.convert.plan import DatasetPlan, Skip, SkipItem, plan_shards
from feedgpu.convert.pool import ItemShardBody
from feedgpu.convert.run import ConversionReport, write_dataset
from feedgpu.convert.run_options import RunOptions
from feedgpu.converters.image_checks import say_changed_inputs, say_thin_classes
from feedgpu.converters.listing import (
    SourceFile,
    assign_splits,
    check_strict,
    fingerprint_files,
    sort_labels,
    walk_source,
)
from feedgpu.errors import UsageError
from feedgpu.format import names
from feedgpu.format.schema import Feature, Schema

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff"})
# Pillow's own default (about 89 MP): beyond it, decoding one file can take gigabytes.
DEFAULT_MAX_PIXELS = 89_478_485
_EXIF_ORIENTATION = 0x0112


@dataclass(frozen=True)
class ImageOptions:
    """Options that change the bytes written; all of them go into the manifest.

    Attributes:
        quality: JPEG quality for re-encoded images.
        lossless: re-encode to PNG instead of JPEG.
        max_size: shrink the long side to this many pixels (re-encoding), or None.
        verify: "fast" decodes JPEGs at 1/8 scale to validate them, "full" at full size.
        max_pixels: larger images are skipped as decompression bombs.
        split: "train=0.9,validation=0.1" hash split when the source has no split folders.
        seed: seeds the assignment of examples to shards.
        shard_size_mb: target shard size.
        num_shards: shards per split, overriding shard_size_mb.
        name: dataset name (TFDS-safe).
        index: write each shard's record index beside it (DALI, PyTorch tfrecord readers).
    """

    quality: int = 95
    lossless: bool = False
    max_size: int | None = None
    verify: str = "fast"
    max_pixels: int = DEFAULT_MAX_PIXELS
    split: str | None = None
    seed: int = 0
    shard_size_mb: float = 128
    num_shards: int | None = None
    name: str | None = None
    index: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.quality <= 100:
            raise UsageError(f"--quality {self.quality}: must be between 1 and 100")
        if self.max_size is not None and self.max_size < 8:
            raise UsageError(f"--max-size {self.max_size}: must be at least 8 pixels")
        if self.verify not in ("fast", "full"):
            raise UsageError(f"--verify {self.verify!r}: choose fast or full")
        if self.max_pixels < 1:
            raise UsageError(f"--max-pixels {self.max_pixels}: must be positive")
        if self.shard_size_mb <= 0:
            raise UsageError(f"--shard-size-mb {self.shard_size_mb}: must be positive")
        if self.num_shards is not None and self.num_shards < 1:
            raise UsageError(f"--num-shards {self.num_shards}: must be at least 1")


def _to_rgb(img: Any) -> Any:
    """Any Pillow mode to 8-bit RGB: 16-bit scaled (not clipped), alpha composited on white."""
    from PIL import Image

    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        img = img.convert("I").point(lambda v: v * (1 / 256)).convert("L")
    elif img.mode == "F":
        img = img.convert("L")
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return img.convert("RGB") if img.mode != "RGB" else img


def _decode_error(e: Exception) -> SkipItem:
    text = str(e) or type(e).__name__
    if "truncat" in text.lower() or isinstance(e, EOFError):
        return SkipItem("truncated", text)
    return SkipItem("undecodable", text)


def normalize_image(data: bytes, options: ImageOptions) -> tuple[bytes, int, int, bool]:
    """Validate one encoded image and return (bytes to store, height, width, kept as is).

    JPEGs that any decoder reads the same way (RGB or greyscale, no EXIF rotation) are kept
    byte for byte; everything else goes through Pillow to RGB.

    Raises:
        SkipItem: empty, truncated, undecodable, or a decompression bomb.
    """
    from PIL import Image

    # The size is checked against --max-pixels in its own words once the header is read
    # (Pillow's own check would name twice the limit); Pillow's guard, the process's, is put
    # back after: a library user's own code relies on it.
    guard, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
    try:
        return _normalize(data, options)
    finally:
        Image.MAX_IMAGE_PIXELS = guard


def _normalize(data: bytes, options: ImageOptions) -> tuple[bytes, int, int, bool]:
    from PIL import Image, ImageOps, UnidentifiedImageError

    if not data:
        raise SkipItem("empty file", "0 bytes")
    try:
        img: Any = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise SkipItem("undecodable", "content is not a known image format") from None
    except Exception as e:  # Pillow's plugins raise many types on malformed headers
        raise _decode_error(e) from None
    width, height = img.size
    if width * height > options.max_pixels:
        raise SkipItem(
            "decompression bomb",
            f"{width}x{height} is {width * height} pixels, over the {options.max_pixels} limit; "
            "raise --max-pixels to allow",
        )
    try:
        fits = options.max_size is None or max(width, height) <= options.max_size
        upright = img.getexif().get(_EXIF_ORIENTATION, 1) == 1
        if img.format == "JPEG" and img.mode in ("RGB", "L") and fits and upright:
            if options.verify == "fast":  # DCT scaling: 1/8 size, still reads every byte
                # Pillow picks the scale from floor(size / request): ask for floor(size / 8).
                # Greyscale output: libjpeg still entropy-decodes every component (what finds
                # truncated and corrupt data) but skips colour conversion (benchmarks/RESULTS.md,
                # "Decisions").
                img.draft("L", (max(1, width // 8), max(1, height // 8)))
            img.load()
            return data, height, width, True
        if options.max_size and not fits and img.format == "JPEG":
            scale = options.max_size / max(width, height)  # decode no larger than needed
            img.draft(img.mode, (math.ceil(width * scale), math.ceil(height * scale)))
        img.load()
        img = ImageOps.exif_transpose(img) or img
        img = _to_rgb(img)
        if options.max_size and max(img.size) > options.max_size:
            img.thumbnail((options.max_size, options.max_size), Image.Resampling.LANCZOS)
        out = io.BytesIO()
        if options.lossless:
            img.save(out, "PNG")
        else:
            img.save(out, "JPEG", quality=options.quality)
    except SkipItem:
        raise
    except Exception as e:  # see above: decoding untrusted bytes
        raise _decode_error(e) from None
    return out.getvalue(), img.height, img.width, False


def image_features(all_jpeg: bool) -> list[Feature]:
    """What each image example holds (the image's encoding named when every one is a JPEG)."""
    return [
        Feature("image", "string", kind="image", encoding="jpeg" if all_jpeg else None),
        Feature("label", "int64", kind="class_label"),
        Feature("path", "string", kind="text"),
        Feature("height", "int64"),
        Feature("width", "int64"),
    ]


# Names, types and shapes are the same whatever the encoding: one schema encodes every example.
_SCHEMA = Schema.of(image_features(all_jpeg=False))


@dataclass(frozen=True)
class ImageProcessor:
    """Turns (relative path, path, label, size) items into image examples."""

    options: ImageOptions

    def process(self, item: tuple[str, str, int, int]) -> tuple[list[bytes], Mapping[str, float]]:
        """One example per image; see `normalize_image` for what is kept and what is skipped."""
        rel, path, label, size = item
        try:
            data = storage.read_bytes(path)
        except OSError as e:
            raise SkipItem("unreadable", e.strerror or str(e)) from None
        if len(data) != size:  # written to (or truncated) since the folder was listed
            raise SkipItem(
                "changed during conversion",
                f"{size} bytes when listed, {len(data)} when read; re-run with --overwrite "
                "to convert it as it is now",
            )
        encoded, height, width, kept = normalize_image(data, self.options)
        example = _SCHEMA.encode(
            {"image": encoded, "label": label, "path": rel, "height": height, "width": width}
        )
        return [example], {"height": height, "width": width, "reencoded": 0 if kept else 1}

    def item_path(self, item: tuple[str, str, int, int]) -> str:
        """The image's path relative to the source."""
        return item[0]

    def item_bytes(self, item: tuple[str, str, int, int]) -> int:
        """The image file's size."""
        return item[3]

    def warm_up(self) -> None:
        """Import Pillow and its common decoders before the first image."""
        from PIL import Image, ImageOps  # noqa: F401 - imported for the first image's sake

        Image.preinit()


def _is_image_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def plan_image_dataset(
    src: str,
    out_dir: str,
    options: ImageOptions,
    *,
    labels_file: str | None = None,
    path_column: str | None = None,
    label_column: str | None = None,
    strict: bool = False,
) -> DatasetPlan:
    """List the source, assign labels and splits, and plan the shards.

    Raises:
        UsageError: no usable images, or a layout that has no labels.
        InputError: with strict, the first bad input found while listing.
    """
    files, skips = walk_source(src, _is_image_name, "not an image")
    placed = assign_splits(files, options.split)
    labelled: list[tuple[str, SourceFile, str]] = []
    extra_fingerprint = b""
    if labels_file:
        from feedgpu.converters.labels import labels_from_file

        labelled, skips, extra_fingerprint = labels_from_file(
            labels_file, src, placed, skips, path_column, label_column
        )
    else:
        for split, below, f in placed:
            if "/" not in below or not split:
                skips.append(
                    Skip(f.rel, "no label", "not inside a class folder (or pass --labels)")
                )
            else:
                labelled.append((split, f, below.split("/", 1)[0]))
    check_strict(skips, strict)
    if not labelled:
        raise UsageError(
            f"no labelled images found in {src} ({len(skips)} files skipped); expected "
            "SRC/CLASS/*.jpg, SRC/train/CLASS/*.jpg, or a flat folder with --labels FILE"
        )
    label_names = sort_labels(label for _, _, label in labelled)
    say_thin_classes(labelled, label_names)
    index = {name: i for i, name in enumerate(label_names)}
    name = names.sanitize_name(options.name or os.path.basename(os.path.abspath(src)))
    tasks = []
    for split in sorted({s for s, _, _ in labelled}, key=names.split_order):
        members = [f for s, f, _ in labelled if s == split]
        label_by_rel = {f.rel: index[label] for s, f, label in labelled if s == split}
        tasks += plan_shards(
            [(f.rel, f.path, label_by_rel[f.rel], f.size) for f in members],
            name=name,
            split=split,
            total_bytes=sum(f.size for f in members),
            target_shard_bytes=int(options.shard_size_mb * (1 << 20)),
            num_shards=options.num_shards,
            seed=options.seed,
            indexed=options.index,
        )
    all_jpeg = not options.lossless
    return DatasetPlan(
        out_dir=out_dir,
        name=name,
        converter="images",
        source=src,
        # index recorded only when on: datasets converted before --index existed keep their
        # fingerprint, so re-running the same command finds them complete.
        options={
            **{k: v for k, v in asdict(options).items() if k != "index" or v},
            "name": name,
            "labels_file": bool(labels_file),
        },
        inputs_fingerprint=fingerprint_files(files, extra_fingerprint),
        features=image_features(all_jpeg),
        label_names=label_names,
        supervised_keys=("image", "label"),
        tasks=tasks,
        listing_skips=skips,
    )


@heap_frozen()
def convert_images(
    src: str,
    out_dir: str,
    options: ImageOptions | None = None,
    *,
    labels_file: str | None = None,
    path_column: str | None = None,
    label_column: str | None = None,
    run: RunOptions | None = None,
    **run_options: Any,
) -> ConversionReport:
    """Convert an image folder into a sharded, TFDS-readable TFRecord dataset in out_dir.

    How it runs is `run` (or `RunOptions(**run_options)`: workers=, strict=, overwrite=,
    allow_skips=, quiet=, runner=, beam_options=). Re-running after a crash finishes the job;
    re-running on a finished dataset is a no-op. runner="beam" writes the same shards, byte
    for byte, as an Apache Beam pipeline. A run that skipped more images for one reason than
    it kept raises InputError unless allow_skips (see `check_kept`).
    """
    run = RunOptions.given(run, run_options).for_paths(src, out_dir)
    storage.ensure_output_dir(out_dir)
    options = options or ImageOptions()

    planned: list[DatasetPlan] = []

    def plan() -> DatasetPlan:
        planned.append(
            plan_image_dataset(
                src,
                out_dir,
                options,
                labels_file=labels_file,
                path_column=path_column,
                label_column=label_column,
                strict=run.strict,
            )
        )
        return planned[0]

    body = ItemShardBody(ImageProcessor(options), strict=run.strict)
    report = write_dataset(plan, body, run, unit="img")
    if planned and not report.already_done:
        say_changed_inputs(planned[0])
    return report
