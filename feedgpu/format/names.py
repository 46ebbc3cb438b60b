"""The dataset's file names: shard names TFDS parses back, the manifest's and skip list's names,
split order, dataset names made TFDS-safe."""

from __future__ import annotations

import re

MANIFEST = "feedgpu.json"
SKIPPED = "skipped.jsonl"
SPLITS = ("train", "validation", "test")
# TFDS parses NAME-SPLIT.tfrecord-XXXXX-of-YYYYY; a dash in NAME breaks that parse.
FILE_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_SHARD_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9_]+)-(?P<split>[A-Za-z0-9_]+)\.tfrecord-(\d{5})-of-(\d{5})$"
)


def split_order(split: str) -> tuple[int, str]:
    """Sort key: train, validation, test first, then any other split by name."""
    return (SPLITS.index(split) if split in SPLITS else len(SPLITS), split)


def sanitize_name(name: str) -> str:
    """A dataset name TFDS can parse back from file names: letters, digits and underscores."""
    clean = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_").lower()
    if not clean:
        return "dataset"
    return clean if clean[0].isalpha() else f"d_{clean}"


def shard_filename(name: str, split: str, index: int, num_shards: int) -> str:
    """TFDS file naming; the zero padding matters, TFDS does not find unpadded shards."""
    return f"{name}-{split}.tfrecord-{index:05d}-of-{num_shards:05d}"


def is_shard_filename(filename: str) -> bool:
    """True for names that `shard_filename` makes."""
    return bool(_SHARD_RE.match(filename))
