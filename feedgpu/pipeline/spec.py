"""`PipelineSpec`: every decision of an input pipeline, the automatic ones made from the
dataset's manifest with their reasons, validated when the spec is made."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from feedgpu.errors import FeedgpuError, UsageError
from feedgpu.format.manifest import Manifest, read_manifest
from feedgpu.pipeline.buckets import choose_boundaries, padding_waste
from feedgpu.pipeline.spec_checks import (
    DTYPES,
    ONLY_FOR,
    SERVICE_MODES,
    TAKES,
    TEXT_MODES,
    check_applies,
    looks_like_path,
    other_kind,
)


def fits_memory_cache(split_bytes: int, ram_budget_bytes: int) -> bool:
    """Whether caching a split's encoded records in memory is safe: half the RAM budget at
    most, since shuffle and prefetch buffers need the rest."""
    return split_bytes <= ram_budget_bytes // 2


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


# Chosen for the host a spec is made on; a saved spec leaves them out (see to_json).
HOST_FIELDS = frozenset({"ram_budget_bytes", "cycle_length"})


def _cycle_length(files: int | None) -> int:
    """Readers interleaved: one per core, no more than the shard files, at most 16."""
    return max(1, min(files or 16, os.cpu_count() or 1, 16))


def _shard_count(data_dir: Any, split: Any) -> int | None:
    """The split's shard files, when its dataset can be read here (None: it cannot)."""
    try:
        return len(read_manifest(str(data_dir)).split(str(split), str(data_dir)).shards)
    except (FeedgpuError, OSError, ValueError, TypeError):
        return None


def _memory_choices(
    size: int, examples: int, budget: int, training: bool
) -> tuple[tuple[Any, tuple[str, str]], tuple[int, tuple[str, str]]]:
    """The cache and the shuffle buffer for a split of `size` bytes, each with its reason."""
    # Cache the encoded records when they fit comfortably: every later epoch skips I/O and
    # parsing.
    cache = "memory" if fits_memory_cache(size, budget) else None
    fits = "within" if cache else "over"
    cache_reason = ("cache", f"split is {size / 1e6:.1f} MB, {fits} half the RAM budget")
    num = max(1, examples)
    per_example = max(1, size // num)
    # A buffer of ~1/10 of the RAM budget, 1k..16k examples: beyond 16k, randomness gained is
    # small compared with the start-up cost of filling the buffer.
    shuffle = min(num, max(1024, min(16384, budget // 10 // per_example))) if training else 0
    why = (
        f"{per_example} bytes per example, {num} examples"
        if training
        else "evaluation: no shuffling"
    )
    shuffle_reason = ("shuffle_buffer", why)
    return (cache, cache_reason), (shuffle, shuffle_reason)


def _text_choices(
    manifest: Manifest, max_length: int, values: dict[str, Any], reasons: list[tuple[str, str]]
) -> None:
    """Text's decisions from the manifest, into `values` with their `reasons`: the pad id, the
    packed mode, and max_length and bucket boundaries from the exact length counts."""
    if manifest.tokenizer is not None:
        values["tokenizer_identity"] = manifest.tokenizer.identity
        values["pad_id"] = manifest.tokenizer.pad_id
        reasons.append(("pad_id", manifest.tokenizer.pad_choice))
    if manifest.pack_length:
        values["text_mode"] = "packed"
        reasons.append(("text_mode", "the dataset is packed"))
    counts = manifest.text.length_counts if manifest.text else ()
    if not counts:
        return
    longest = max(length for length, _ in counts)
    values["max_length"] = max_length = min(max_length, -(-longest // 8) * 8)
    bounds = choose_boundaries(counts, max_length)
    values["bucket_boundaries"] = tuple(bounds)
    waste = padding_waste(counts, bounds)
    fixed = padding_waste(counts, [max_length])
    reasons.append(
        (
            "bucket_boundaries",
            f"expected padding {waste:.1%} with buckets vs {fixed:.1%} padding all to {max_length}",
        )
    )


@dataclass(frozen=True)
class PipelineSpec:
    """Every decision of an input pipeline; `for_dataset` fills the automatic ones.

    Attributes:
        data_dir: a dataset written by `feedgpu convert`.
        split: which split to read.
        batch_size: examples per batch over all replicas (the global batch): with an input
            context, each replica's pipeline batches batch_size / replicas.
        training: shuffle, augment and drop the last partial batch.
        kind: "image" or "text" (from the manifest).
        image_size: (height, width) of output images.
        dtype: output image dtype; cast last, so the host does the least work.
        normalize: subtract ImageNet mean and divide by its std (float dtypes) on the host.
            Off by default: this per-channel broadcast costs the host much of its images/s
            (benchmarks/RESULTS.md), while a model's first layer (e.g. Keras
            `Normalization`) does it on the accelerator for free.
        random_flip: horizontal flips when training.
        crop_area: random-resized-crop area range when training.
        crop_aspect: random-resized-crop aspect ratio range when training.
        eval_crop_fraction: centre crop side, as a fraction of the short side, for evaluation.
        text_mode: "pad" to max_length, "bucket" by length, or "packed" (as stored).
        max_length: text sequence length (pad) or the largest bucket (bucket).
        bucket_boundaries: upper bounds of the length buckets.
        pad_id: id used for padding.
        tokenizer_identity: refuse datasets tokenized by any other tokenizer, if set.
        shuffle_files: shuffle the order of shard files each epoch.
        shuffle_buffer: examples in the shuffle buffer (0: no shuffling).
        cache: "memory", a file path prefix, or None.
        cycle_length: files read at once by the interleave.
        drop_remainder: drop the last partial batch (static shapes for XLA).
        deterministic: keep element order reproducible (slower when stages are uneven).
        seed: keys file order, shuffling and augmentation by epoch and place in it; None for
            fresh randomness (such a run cannot be resumed exactly: `InputPosition`).
        repeat: repeat epochs inside the pipeline (after the shuffle, so epochs stay distinct),
            for `model.fit(steps_per_epoch=...)` and endless loops: the parallel stages and
            the prefetch buffer then run on across epoch boundaries instead of draining
            (image batches then straddle epochs; text batches never do).
        ram_budget_bytes: memory the cache decision and tf.data's autotuner may plan for.
        autotune: let tf.data's autotuner set parallelism and buffer sizes while running.
            Off by default, so AUTOTUNE stages run one thread per core: the autotuner often
            left the image decode map on one core, the others idle (TF 2.21;
            benchmarks/RESULTS.md, "Decisions").
        ignore_errors: skip records that fail to read or parse instead of failing.
        prefetch_to_device: prefetch batches onto the first GPU when there is one.
        service: tf.data service address (grpc://host:port), to run the pipeline remotely.
        service_mode: "parallel_epochs" or "distributed_epoch".
        reasons: why each automatic value was chosen, printed with the spec.
    """

    data_dir: str
    split: str = "train"
    batch_size: int = 32
    training: bool = False
    kind: str = "image"
    image_size: tuple[int, int] = (224, 224)
    dtype: str = "float32"
    normalize: bool = False
    random_flip: bool = True
    crop_area: tuple[float, float] = (0.08, 1.0)
    crop_aspect: tuple[float, float] = (3 / 4, 4 / 3)
    eval_crop_fraction: float = 0.875
    text_mode: str = "pad"
    max_length: int = 512
    bucket_boundaries: tuple[int, ...] = ()
    pad_id: int = 0
    tokenizer_identity: str | None = None
    shuffle_files: bool = False
    shuffle_buffer: int = 0
    cache: str | None = None
    cycle_length: int = 4
    drop_remainder: bool = False
    deterministic: bool = True
    seed: int | None = None
    repeat: bool = False
    ram_budget_bytes: int = 2 << 30
    autotune: bool = False
    ignore_errors: bool = False
    prefetch_to_device: bool = True
    service: str | None = None
    service_mode: str = "parallel_epochs"
    reasons: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for name, (takes, check) in TAKES.items():  # types first: the checks below compare
            given = getattr(self, name)
            try:
                value = check(given)
            except (TypeError, ValueError):
                raise UsageError(f"{name} {given!r}: takes {takes}") from None
            if value is not given:
                object.__setattr__(self, name, value)  # normalised: a square size, tuples
        if self.batch_size < 1:
            raise UsageError(f"batch_size {self.batch_size}: must be at least 1")
        if self.kind not in ("image", "text"):
            raise UsageError(f"kind {self.kind!r}: must be image or text")
        if self.dtype not in DTYPES:
            raise UsageError(f"dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}")
        if self.text_mode not in TEXT_MODES:
            raise UsageError(f"text_mode {self.text_mode!r}: choose one of {', '.join(TEXT_MODES)}")
        if min(self.image_size) < 1:
            raise UsageError(f"image_size {self.image_size}: both sides must be at least 1")
        if self.max_length < 1:
            raise UsageError(f"max_length {self.max_length}: must be at least 1")
        if not 0 < self.crop_area[0] <= self.crop_area[1] <= 1:
            raise UsageError(f"crop_area {self.crop_area}: need 0 < low <= high <= 1")
        if not 0 < self.eval_crop_fraction <= 1:
            raise UsageError(f"eval_crop_fraction {self.eval_crop_fraction}: must be in (0, 1]")
        if self.shuffle_buffer < 0:
            raise UsageError(f"shuffle_buffer {self.shuffle_buffer}: must be at least 0 (0: off)")
        if self.cycle_length < 1:
            raise UsageError(f"cycle_length {self.cycle_length}: must be at least 1")
        if list(self.bucket_boundaries) != sorted(set(self.bucket_boundaries)):
            raise UsageError(f"bucket_boundaries {self.bucket_boundaries}: must be increasing")
        if self.service and not self.service.startswith(("grpc://", "grpc+loas://")):
            raise UsageError(f"service {self.service!r}: expected grpc://HOST:PORT")
        if self.service and self.ignore_errors:
            raise UsageError(
                "ignore_errors reads shards with a Python generator, which tf.data service "
                "workers cannot run: repair the dataset (feedgpu verify) or read it locally"
            )
        if self.service_mode not in SERVICE_MODES:
            raise UsageError(
                f"service_mode {self.service_mode!r}: choose {' or '.join(SERVICE_MODES)}"
            )
        if self.cache not in (None, "memory") and not looks_like_path(self.cache):
            raise UsageError(
                f"cache {self.cache!r}: use 'memory', None, or a file path prefix such as "
                "/tmp/feedgpu-cache/train (a bare word is taken for a typo, not a file)"
            )

    @classmethod
    def for_dataset(
        cls,
        data_dir: str,
        split: str = "train",
        batch_size: int = 32,
        training: bool = False,
        **overrides: Any,
    ) -> PipelineSpec:
        """A spec with every automatic decision made from the dataset's manifest.

        Raises:
            DatasetError: not a feedgpu dataset, or no such split.
            UsageError: an override is not a spec field or has a bad value.
        """
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise UsageError(f"unknown PipelineSpec field(s): {', '.join(unknown)}")
        manifest = read_manifest(data_dir)
        info = manifest.split(split, data_dir)
        kind = manifest.kind
        check_applies(overrides, data_dir, kind, manifest.pack_length)
        reasons: list[tuple[str, str]] = []
        budget = int(overrides.get("ram_budget_bytes", _memory_bytes() // 2))
        if "ram_budget_bytes" not in overrides:
            reasons.append(("ram_budget_bytes", "half of this machine's memory"))
        cache, shuffle = _memory_choices(info.num_bytes, info.num_examples, budget, training)
        reasons += [cache[1], shuffle[1]]
        files = len(info.shards)
        if "cycle_length" not in overrides:
            reasons.append(("cycle_length", f"{files} shard files, {os.cpu_count()} cores"))
        values: dict[str, Any] = {
            "data_dir": data_dir,
            "split": split,
            "batch_size": batch_size,
            "training": training,
            "kind": kind,
            "shuffle_files": training and files > 1,
            "shuffle_buffer": shuffle[0],
            "cache": cache[0],
            "cycle_length": _cycle_length(files),
            "drop_remainder": training,
            "ram_budget_bytes": budget,
        }
        if kind == "image" and overrides.get("service"):
            # Batches cross the network: uint8 is 4x fewer bytes than float32, the model casts
            # on the accelerator (benchmarks/RESULTS.md, "tf.data service").
            values["dtype"] = "uint8"
            reasons.append(("dtype", "tf.data service: uint8 batches are 4x fewer bytes"))
        if kind == "text":
            _text_choices(manifest, int(overrides.get("max_length", 512)), values, reasons)
        values.update(overrides)
        values["reasons"] = tuple(reasons)
        return cls(**values)

    def to_json(self) -> str:
        """The spec as JSON, to pin a tuned configuration. What was chosen for this host (RAM
        budget, interleave cycle from its cores) is left out: it is chosen again on load,
        for the host that loads it; a value set by hand is kept."""
        automatic = {name for name, _ in self.reasons} & HOST_FIELDS
        kept = {k: v for k, v in asdict(self).items() if k != "reasons" and k not in automatic}
        return json.dumps(kept, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PipelineSpec:
        """Inverse of to_json, the host's own choices made again where it left them out."""
        try:
            data = json.loads(text)
        except ValueError as e:
            raise UsageError(f"not a PipelineSpec JSON document ({e})") from e
        if not isinstance(data, dict):
            raise UsageError("not a PipelineSpec JSON document (expected an object)")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise UsageError(f"unknown PipelineSpec field(s) in JSON: {', '.join(unknown)}")
        reasons = []
        if "ram_budget_bytes" not in data:
            data["ram_budget_bytes"] = _memory_bytes() // 2
            reasons.append(("ram_budget_bytes", "half of this machine's memory"))
        if "cycle_length" not in data:
            files = _shard_count(data.get("data_dir"), data.get("split", "train"))
            data["cycle_length"] = _cycle_length(files)
            reasons.append(("cycle_length", f"{files or 'unknown'} shard files, this host's cores"))
        # lists become tuples, and wrong types one line, in __post_init__
        return cls(**data, reasons=tuple(reasons))

    def __str__(self) -> str:
        why = dict(self.reasons)
        lines = [f"PipelineSpec for {self.data_dir} [{self.split}]"]
        for f in fields(self):
            if f.name == "reasons" or f.name in ONLY_FOR[other_kind(self.kind)]:
                continue
            value = getattr(self, f.name)
            note = f"  # {why[f.name]}" if f.name in why else ""
            lines.append(f"  {f.name} = {value!r}{note}")
        return "\n".join(lines)

    def with_changes(self, **changes: Any) -> PipelineSpec:
        """A copy with some fields changed (validated again); a changed field is no longer an
        automatic choice, so it loses its reason (and a saved spec keeps it)."""
        kept = tuple((name, why) for name, why in self.reasons if name not in changes)
        return replace(self, **{"reasons": kept, **changes})
