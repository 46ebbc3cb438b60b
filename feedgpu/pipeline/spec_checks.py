"""What each `PipelineSpec` field takes (values normalised, one-line errors naming the field),
and which fields apply to which kind of dataset, so a setting that cannot apply is refused."""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable
from typing import Any

from feedgpu.errors import UsageError

DTYPES = ("float32", "bfloat16", "float16", "uint8")
TEXT_MODES = ("pad", "bucket", "packed")
SERVICE_MODES = ("parallel_epochs", "distributed_epoch")


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(value)
    return value if type(value) is int else int(value)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(value)
    if type(value) in (int, float):
        return value  # type: ignore[return-value]
    return float(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(value)
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def _maybe(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else check(value)


def _pair(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def pair(value: Any) -> tuple[Any, Any]:
        if isinstance(value, (str, bytes)) or len(value) != 2:
            raise TypeError(value)
        first, second = check(value[0]), check(value[1])
        same = isinstance(value, tuple) and first is value[0] and second is value[1]
        return value if same else (first, second)

    return pair


def _size(value: Any) -> tuple[int, int]:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (int(value), int(value))  # a square
    result: tuple[int, int] = _pair(_whole)(value)
    return result


def _ints(value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)):
        raise TypeError(value)
    items = tuple(_whole(v) for v in value)
    return value if isinstance(value, tuple) and items == value else items


# What each field takes: the one-line error names it, and values are normalised by it.
TAKES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "data_dir": ("a dataset folder (str)", _text),
    "split": ("a split name (str)", _text),
    "kind": ('"image" or "text"', _text),
    "image_size": ("an int (a square) or a (height, width) pair of ints", _size),
    "dtype": (f"one of {', '.join(DTYPES)}", _text),
    "crop_area": ("a (low, high) pair of numbers", _pair(_number)),
    "crop_aspect": ("a (low, high) pair of numbers", _pair(_number)),
    "eval_crop_fraction": ("a number in (0, 1]", _number),
    "text_mode": (f"one of {', '.join(TEXT_MODES)}", _text),
    "bucket_boundaries": ("a list of increasing ints", _ints),
    "tokenizer_identity": ("a tokenizer identity (str) or None", _maybe(_text)),
    "cache": ("'memory', a file path prefix (str) or None", _maybe(_text)),
    "seed": ("an int or None", _maybe(_whole)),
    "service": ("grpc://HOST:PORT or None", _maybe(_text)),
    "service_mode": (f"one of {', '.join(SERVICE_MODES)}", _text),
    **{
        name: ("an int", _whole)
        for name in (
            "batch_size",
            "max_length",
            "pad_id",
            "shuffle_buffer",
            "cycle_length",
            "ram_budget_bytes",
        )
    },
    **{
        name: ("True or False", _flag)
        for name in (
            "training",
            "normalize",
            "random_flip",
            "shuffle_files",
            "drop_remainder",
            "deterministic",
            "repeat",
            "autotune",
            "ignore_errors",
            "prefetch_to_device",
        )
    },
}
# Fields that mean something for one kind of dataset only.
ONLY_FOR = {
    "image": frozenset(
        {"image_size", "dtype", "normalize", "random_flip", "crop_area", "crop_aspect"}
        | {"eval_crop_fraction"}
    ),
    "text": frozenset(
        {"text_mode", "max_length", "bucket_boundaries", "pad_id", "tokenizer_identity"}
    ),
}


def other_kind(kind: str) -> str:
    return "text" if kind == "image" else "image"


def looks_like_path(cache: str) -> bool:
    return os.path.isabs(cache) or os.sep in cache or "://" in cache or cache.startswith(".")


def check_applies(overrides: dict[str, Any], data_dir: str, kind: str, pack: int | None) -> None:
    """Refuse settings the dataset cannot honour, instead of ignoring them."""
    what = {"image": "images", "text": "token ids"}[kind]
    if "kind" in overrides and overrides["kind"] != kind:
        raise UsageError(f"kind={overrides['kind']!r}: {data_dir} holds {what} (kind={kind!r})")
    wrong = sorted(set(overrides) & ONLY_FOR[other_kind(kind)])
    if wrong:
        raise UsageError(
            f"{', '.join(wrong)}: for {other_kind(kind)} datasets only; {data_dir} holds {what}"
        )
    mode = overrides.get("text_mode")
    if mode is not None and pack and mode != "packed":
        raise UsageError(
            f"text_mode={mode!r}: {data_dir} is packed into sequences of {pack} ids "
            "(convert text --pack); it reads as text_mode='packed'"
        )
    if mode == "packed" and kind == "text" and not pack:
        raise UsageError(
            f"text_mode='packed': {data_dir} was not packed; use 'pad' or 'bucket', or "
            "re-convert with --pack N"
        )
