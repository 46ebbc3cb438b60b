"""The user's own tf.data pipeline in bench-input: found (`--dataset-fn module:function`),
described from its element spec, and drained endlessly as training would.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from feedgpu.errors import UsageError

DATASET_NAME = "your tf.data pipeline"


def dataset_from_fn(target: str) -> Any:
    """The `tf.data.Dataset` that `module:function` returns (the module found from the
    current directory too, as `python -c` would find it).

    Raises:
        UsageError: not module:function, cannot import or call it, or not a dataset.
    """
    import tensorflow as tf

    module_name, _, function_name = target.partition(":")
    if not module_name or not function_name:
        raise UsageError(f"--dataset-fn {target!r}: expected MODULE:FUNCTION, e.g. mytrain:make_ds")
    _cwd_importable()
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"--dataset-fn {target}: cannot import {module_name} ({e})") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise UsageError(f"--dataset-fn {target}: {module_name} has no function {function_name}")
    dataset = function()
    if not isinstance(dataset, tf.data.Dataset):
        raise UsageError(
            f"--dataset-fn {target}: returned {type(dataset).__name__}, not a tf.data.Dataset"
        )
    return dataset


def import_modules(names: list[str]) -> None:
    """Import modules that register Keras custom objects (`--import`)."""
    _cwd_importable()
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise UsageError(f"--import {name}: cannot import it ({e})") from None


def _cwd_importable() -> None:
    """Modules in the current directory importable, as `python -c` finds them."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def endless(dataset: Any) -> Iterator[Any]:
    """The dataset's batches, epoch after epoch (a new iterator each, as `model.fit` makes)."""
    while True:
        empty = True
        for batch in dataset:
            empty = False
            yield batch
        if empty:
            raise UsageError(f"{DATASET_NAME} gave no batch")


@dataclass(frozen=True)
class DatasetShape:
    """What a user's batches hold, from the dataset's element spec.

    Attributes:
        kind: "image" (a batch of images) or "text" (a dict with input_ids).
        labelled: batches are (features, labels).
        image_size: (height, width) of image batches, when static.
        features: the text features' names.
        dtype: the images' dtype (text: the ids').
        length: text batches' sequence length, when static.
    """

    kind: str
    labelled: bool
    image_size: tuple[int, int] | None
    features: tuple[str, ...]
    dtype: str = "float32"
    length: int | None = None


def describe(dataset: Any) -> DatasetShape:
    """Image or text, labelled or not: what bench-input needs to pick or check a model.

    Raises:
        UsageError: batches that are neither.
    """
    spec = dataset.element_spec
    labelled = isinstance(spec, tuple) and len(spec) == 2
    features = spec[0] if labelled else spec
    shape = getattr(features, "shape", None)
    if shape is not None and shape.rank == 4:
        height, width = shape[1], shape[2]
        size = (int(height), int(width)) if height and width else None
        return DatasetShape("image", labelled, size, (), features.dtype.name)
    if isinstance(features, dict) and "input_ids" in features:
        ids = features["input_ids"]
        length = int(ids.shape[1]) if ids.shape.rank == 2 and ids.shape[1] else None
        return DatasetShape("text", labelled, None, tuple(sorted(features)), ids.dtype.name, length)
    raise UsageError(
        f"{DATASET_NAME} gives batches of {spec}; bench-input measures batches of images "
        "(batch, height, width, channels) or dicts with input_ids (batch, length), "
        "optionally with labels as (features, labels)"
    )


def label_count(batches: list[Any]) -> int:
    """Classes for a built-in model's head: twice the largest label seen, at least 2 (labels
    not yet seen must still fit the head)."""
    import tensorflow as tf

    seen = max((int(tf.reduce_max(b[1])) for b in batches if isinstance(b, tuple)), default=0)
    return max(2, 2 * (seen + 1))


def vocab_count(batches: list[Any]) -> int:
    """A vocabulary for a built-in text model: twice the largest id seen, at least 30,522."""
    import tensorflow as tf

    def ids(batch: Any) -> Any:
        return (batch[0] if isinstance(batch, tuple) else batch)["input_ids"]

    seen = max(int(tf.reduce_max(ids(b))) for b in batches)
    return max(30522, 2 * (seen + 1))
