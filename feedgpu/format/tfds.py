"""TFDS's metadata beside the shards (dataset_info.json, features.json, label files), written as
TFDS 4.9 writes them, so `tfds.builder_from_directory(OUT)` reads a converted dataset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from feedgpu import storage
from feedgpu.format.names import FILE_TEMPLATE
from feedgpu.format.schema import Schema


def write_tfds_metadata(
    out_dir: str,
    *,
    name: str,
    schema: Schema,
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
    for f in schema.features:
        if f.kind == "class_label":
            text = "".join(f"{label}\n" for label in label_names)
            storage.write_atomic(storage.join(out_dir, f"{f.name}.labels.txt"), text.encode())
    storage.write_json(storage.join(out_dir, "features.json"), schema.to_tfds(label_names))
    storage.write_json(storage.join(out_dir, "dataset_info.json"), info)
