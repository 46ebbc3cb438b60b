"""What a pipeline reads of its dataset, resolved from the manifest once: `build_pipeline` and
`InputPosition` make a `SplitView` and pass it down, so nothing below them reads the manifest
or looks the split up again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from feedgpu import storage
from feedgpu.errors import DatasetError, UsageError
from feedgpu.format.manifest import read_manifest
from feedgpu.format.schema import Schema

if TYPE_CHECKING:
    from feedgpu.pipeline.spec import PipelineSpec


@dataclass(frozen=True)
class SplitView:
    """One split of a dataset as one host's pipeline reads it.

    Attributes:
        kind: "image" or "text".
        files: this host's shard files (full paths), in the split's order.
        num_examples: examples in those files.
        schema: what each record holds (its parse spec).
        labelled: examples carry a class label.
        pack_length: the packed sequence length, when text was packed.
        dataset_fingerprint: the conversion's fingerprint (a re-conversion changes it).
        shards: every shard of the split as (file, examples, bytes), whichever host reads it.
        host: (input pipelines, this one's id): (1, 0) without an input context.
    """

    kind: str
    files: tuple[str, ...]
    num_examples: int
    schema: Schema
    labelled: bool
    pack_length: int | None
    dataset_fingerprint: str
    shards: tuple[tuple[str, int, int], ...]
    host: tuple[int, int]


def view_split(spec: PipelineSpec, input_context: Any = None) -> SplitView:
    """The split `spec` names, as this host's pipeline reads it.

    Raises:
        DatasetError: not a feedgpu dataset, no such split, a tokenizer other than the one the
            spec names, or fewer shard files than input pipelines.
        UsageError: the spec's kind is not the dataset's.
    """
    manifest = read_manifest(spec.data_dir)
    if spec.kind != manifest.kind:
        raise UsageError(
            f"kind={spec.kind!r}: {spec.data_dir} holds {manifest.kind} examples; "
            f"use kind={manifest.kind!r} (PipelineSpec.for_dataset sets it)"
        )
    identity = manifest.tokenizer.identity if manifest.tokenizer else None
    if spec.tokenizer_identity and identity != spec.tokenizer_identity:
        raise DatasetError(
            f"{spec.data_dir} was tokenized by tokenizer {str(identity)[:12]}..., not the "
            f"{spec.tokenizer_identity[:12]}... this pipeline expects; re-convert the text or "
            "update tokenizer_identity"
        )
    split = manifest.split(spec.split, spec.data_dir)
    shards = list(split.shards)
    host = (1, 0)
    if input_context is not None and input_context.num_input_pipelines > 1:
        host = (input_context.num_input_pipelines, input_context.input_pipeline_id)
        if len(shards) < host[0]:
            raise DatasetError(
                f"{len(shards)} shard files cannot feed {host[0]} input pipelines; "
                "re-convert with more --num-shards"
            )
        shards = shards[host[1] :: host[0]]
    return SplitView(
        kind=manifest.kind,
        files=tuple(storage.join(spec.data_dir, s.file) for s in shards),
        num_examples=sum(s.num_examples for s in shards),
        schema=manifest.schema,
        labelled=manifest.labelled,
        pack_length=manifest.pack_length,
        dataset_fingerprint=manifest.fingerprint,
        shards=tuple((s.file, s.num_examples, s.num_bytes) for s in split.shards),
        host=host,
    )
