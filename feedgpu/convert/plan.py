"""Planning a conversion: the seeded assignment of inputs to shard files, shard counts, what an
input that did not convert is (`Skip`), and the whole plan a converter hands over (`DatasetPlan`).

A conversion is a list of independent `ShardTask`s: each is written whole by one process, so the
same task always produces the same bytes whoever runs it (a pool worker, a Beam worker).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from feedgpu.format.manifest import TokenizerInfo
from feedgpu.format.names import shard_filename
from feedgpu.format.schema import Feature, Schema

# Several files per split even for small datasets: parallel interleave reads several files at
# once, per-epoch file shuffling needs more than one, and each training host takes whole files.
MIN_SHARDS = 16
MIN_SHARD_BYTES = 4 << 20


@dataclass(frozen=True)
class Skip:
    """An input that did not become an example.

    Attributes:
        path: the input, relative to the source folder.
        reason: a short category, counted in the manifest ("truncated", "not an image", ...).
        detail: what exactly was wrong, for the user.
    """

    path: str
    reason: str
    detail: str = ""


class SkipItem(Exception):
    """Raised by a processor for an input it cannot convert."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class ShardTask:
    """One output file and the inputs that go into it, in order; `indexed`: with its record
    index beside it (`feedgpu.format.index`)."""

    split: str
    index: int
    num_shards: int
    filename: str
    items: tuple[Any, ...]
    indexed: bool = False


def count_shards(total_bytes: float, target_shard_bytes: float, num_shards: int | None) -> int:
    """Shards for a split: as asked, else by size, but several even for small data (see
    MIN_SHARDS)."""
    if num_shards is not None:
        return max(1, num_shards)
    by_size = math.ceil(total_bytes / target_shard_bytes)
    by_parallelism = min(MIN_SHARDS, math.ceil(total_bytes / MIN_SHARD_BYTES))
    return max(1, by_size, by_parallelism)


def plan_shards(
    items: Sequence[Any],
    *,
    name: str,
    split: str,
    total_bytes: int,
    target_shard_bytes: int,
    num_shards: int | None,
    seed: int,
    indexed: bool = False,
) -> list[ShardTask]:
    """Spread a split's items over shards: a seeded shuffle, then equal contiguous runs.

    The shuffle means every shard mixes classes and sources, so reading a few shards gives a
    representative sample; the seed makes the assignment, and so the bytes, repeatable.
    """
    if not items:
        return []
    num_shards = count_shards(total_bytes, target_shard_bytes, num_shards)
    num_shards = max(1, min(num_shards, len(items)))
    order = list(items)
    random.Random(f"{seed}/{split}").shuffle(order)
    n = len(order)
    return [
        ShardTask(
            split=split,
            index=i,
            num_shards=num_shards,
            filename=shard_filename(name, split, i, num_shards),
            items=tuple(order[i * n // num_shards : (i + 1) * n // num_shards]),
            indexed=indexed,
        )
        for i in range(num_shards)
    ]


def default_workers() -> int:
    """The CPUs this process may use (cgroup and affinity aware where Python tells)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class DatasetPlan:
    """Everything a converter decided before any example is written.

    Attributes:
        out_dir: the output folder.
        name: dataset name (TFDS-safe).
        converter: "images" or "text".
        source: the input folder, as given.
        options: the options that change the bytes written (compared on re-runs).
        inputs_fingerprint: hash of the input listing (paths, sizes, mtimes).
        features: the example fields.
        label_names: class names, index = label.
        supervised_keys: (input, label) feature names for `as_supervised=True`, if labelled.
        tasks: the shards to write.
        listing_skips: inputs rejected while listing (hidden, wrong extension, ...).
        tokenizer: for text, the tokenizer and the ids readers need.
        stages_s: parts of planning timed on the way (say, "tokenizer": loading or training
            it), for the report; not part of the dataset's identity.
    """

    out_dir: str
    name: str
    converter: str
    source: str
    options: Mapping[str, Any]
    inputs_fingerprint: str
    features: Sequence[Feature]
    label_names: Sequence[str]
    supervised_keys: tuple[str, str] | None
    tasks: Sequence[ShardTask]
    listing_skips: Sequence[Skip] = ()
    tokenizer: TokenizerInfo | None = None
    stages_s: Mapping[str, float] = field(default_factory=dict)

    @property
    def schema(self) -> Schema:
        """The features as one object: it encodes, checks and describes examples."""
        return Schema.of(self.features)

    @property
    def fingerprint(self) -> str:
        """Identity of the output: options plus inputs."""
        return output_fingerprint(self.options, self.inputs_fingerprint, self.name)


def output_fingerprint(options: Mapping[str, Any], inputs_fingerprint: str, name: str) -> str:
    """Identity of a dataset: its recorded options, its inputs' fingerprint and its name."""
    key = json.dumps([options, inputs_fingerprint, name], sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()
