"""The on-disk dataset: feature specs, shard names, the `feedgpu.json` manifest, TFDS metadata.

Nothing here imports TensorFlow: the converters write these files from plain processes, and the
tests prove that `tfds.builder_from_directory` reads them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from feedgpu import storage

MANIFEST = "feedgpu.json"
SKIPPED = "skipped.jsonl"
SPLITS = ("train", "validation", "test")
# TFDS parses NAME-SPLIT.tfrecord-XXXXX-of-YYYYY; a dash in NAME breaks that parse.
FILE_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_SHARD_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9_]+)-(?P<split>[A-Za-z0-9_]+)\.tfrecord-(\d{5})-of-(\d{5})$"
)


@dataclass(frozen=True)
class Feature:
    """One field of every example.

    Attributes:
        name: key in the `tf.train.Example`.
        dtype: "string" (bytes), "int64" or "float32".
        shape: () for one value per example, (-1,) for a variable-length list.
        kind: the TFDS connector: "image", "class_label", "text" or "tensor".
        encoding: for images, "jpeg" or "png" when every image has it, else None.
    """

    name: str
    dtype: str
    shape: tuple[int, ...] = ()
    kind: str = "tensor"
    encoding: str | None = None

    def to_tfds(self, label_names: Sequence[str]) -> dict[str, Any]:
        """This feature as a `features.json` entry, as TFDS 4.9 writes it."""
        prefix = "tensorflow_datasets.core.features."
        if self.kind == "image":
            image: dict[str, Any] = {"dtype": "uint8", "shape": {"dimensions": ["-1", "-1", "3"]}}
            if self.encoding:
                image["encodingFormat"] = self.encoding
            return {"image": image, "pythonClassName": prefix + "image_feature.Image"}
        if self.kind == "class_label":
            return {
                "classLabel": {"numClasses": str(len(label_names))},
                "pythonClassName": prefix + "class_label_feature.ClassLabel",
            }
        if self.kind == "text":
            return {"pythonClassName": prefix + "text_feature.Text", "text": {}}
        dtype = {"string": "string", "int64": "int64", "float32": "float32"}[self.dtype]
        scalar = {
            "pythonClassName": prefix + "scalar.Scalar",
            "tensor": {"dtype": dtype, "encoding": "none", "shape": {}},
        }
        if not self.shape:
            return scalar
        return {
            "pythonClassName": prefix + "sequence_feature.Sequence",
            "sequence": {"feature": scalar, "length": "-1"},
        }


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


def write_json(path: str, obj: Any, *, durable: bool = False) -> None:
    """Deterministic, readable JSON, written atomically."""
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    storage.write_atomic(path, text.encode("utf-8"), durable=durable)


def features_to_json(features: Sequence[Feature]) -> list[dict[str, Any]]:
    """Feature specs for the manifest."""
    return [{**asdict(f), "shape": list(f.shape)} for f in features]


def write_tfds_metadata(
    out_dir: str,
    *,
    name: str,
    features: Sequence[Feature],
    splits: Mapping[str, Sequence[tuple[int, int]]],
    label_names: Sequence[str],
    supervised_keys: tuple[str, str] | None,
    description: str,
) -> None:
    """Write dataset_info.json, features.json and label names the way TFDS 4.9 does.

    Written here rather than by `tfds.folder_dataset.write_metadata` so that a conversion never
    pays TensorFlow's import; the round-trip tests read the result with TFDS itself.

    Args:
        splits: split name -> (records, bytes) for each shard, in shard order.
    """
    info: dict[str, Any] = {
        "description": description,
        "fileFormat": "tfrecord",
        "name": name,
        "splits": [
            {
                "filepathTemplate": FILE_TEMPLATE,
                "name": split,
                "numBytes": str(sum(b for _, b in shards)),
                "shardLengths": [str(n) for n, _ in shards],
            }
            for split, shards in splits.items()
        ],
        "version": "1.0.0",
    }
    if supervised_keys:
        items = [{"featureKey": k} for k in supervised_keys]
        info["supervisedKeys"] = {"tuple": {"items": items}}
    features_json = {
        "featuresDict": {"features": {f.name: f.to_tfds(label_names) for f in features}},
        "pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
    }
    for f in features:
        if f.kind == "class_label":
            text = "".join(f"{label}\n" for label in label_names)
            storage.write_atomic(storage.join(out_dir, f"{f.name}.labels.txt"), text.encode())
    write_json(storage.join(out_dir, "features.json"), features_json)
    write_json(storage.join(out_dir, "dataset_info.json"), info)
