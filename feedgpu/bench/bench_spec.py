"""The one place a bench-input run's PipelineSpec is resolved: from the dataset, a saved spec,
the caller's overrides, what the model takes and, beside a user's own pipeline, the shape of its
batches; whatever cannot apply is refused in one line, for library callers and the CLI alike.
"""

from __future__ import annotations

from typing import Any

from feedgpu.bench.user_data import DATASET_NAME, DatasetShape
from feedgpu.bench.user_model import ModelFit
from feedgpu.errors import UsageError
from feedgpu.format.manifest import read_manifest
from feedgpu.pipeline.spec import PipelineSpec
from feedgpu.pipeline.spec_checks import DTYPES, check_applies


def shape_overrides(shape: DatasetShape, kind: str) -> dict[str, Any]:
    """The PipelineSpec fields that make feedgpu's batches look like the user's: the same
    image size and dtype, or the same text length (padded to it)."""
    if shape.kind != kind:
        raise UsageError(
            f"{DATASET_NAME} gives {shape.kind} batches and the dataset holds {kind}: a side "
            "by side needs the same kind of data"
        )
    wanted: dict[str, Any] = {}
    if kind == "image":
        if shape.image_size:
            wanted["image_size"] = shape.image_size
        if shape.dtype in DTYPES:
            wanted["dtype"] = shape.dtype
    elif shape.length:
        wanted.update(max_length=shape.length, text_mode="pad")
    return wanted


def bench_spec(
    data_dir: str,
    *,
    split: str = "train",
    batch_size: int = 32,
    training: bool = True,
    overrides: dict[str, Any] | None = None,
    spec: PipelineSpec | None = None,
    fit: ModelFit | None = None,
    yours: DatasetShape | None = None,
) -> PipelineSpec:
    """The spec to measure on data_dir.

    Args:
        spec: a saved spec to start from (its data_dir replaced by data_dir); else one made
            for the dataset (PipelineSpec.for_dataset).
        overrides: fields the caller sets (the CLI's --image-size, --text-mode...).
        fit: what the user's model takes (its image size, its sequence length).
        yours: the user's own pipeline's batches, to build feedgpu's to the same shape.

    Raises:
        UsageError: a field that does not apply to the dataset, or that contradicts what the
            model takes or what the user's pipeline gives.
        DatasetError: data_dir is not a feedgpu dataset.
    """
    manifest = read_manifest(data_dir)
    asked = dict(overrides or {})
    needs: list[tuple[str, dict[str, Any]]] = []
    if fit is not None:
        needs.append(("the model takes", dict(fit.overrides)))
    if yours is not None:
        needs.append((f"{DATASET_NAME} gives", shape_overrides(yours, manifest.kind)))
    for who, wanted in needs:
        for name, value in wanted.items():
            if asked.setdefault(name, value) != value:
                raise UsageError(
                    f"{who} {name}={value}; {name}={asked[name]} does not fit it (drop the "
                    "option: it is read from there)"
                )
    if manifest.pack_length and asked.get("text_mode") == "pad":
        asked.pop("text_mode")  # a packed dataset reads packed, at its own length
        asked.pop("max_length", None)
    check_applies(asked, data_dir, manifest.kind, manifest.pack_length)
    if spec is not None:
        return spec.with_changes(data_dir=data_dir, batch_size=batch_size, **asked)
    return PipelineSpec.for_dataset(
        data_dir, split, batch_size=batch_size, training=training, **asked
    )
