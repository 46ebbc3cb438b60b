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
from feedgpu.pipeline.host_shares import host_shares

if TYPE_CHECKING:
    from feedgpu.pipeline.spec import PipelineSpec


@dataclass(frozen=True)
class SplitView:
    """One split of a dataset as one host's pipeline reads it.

    Attributes:
        kind: "image" or "text".
        pieces: what this host reads, in the split's order: (shard file's full path, records
            to skip, records to read or -1 for the rest) (`host_shares`).
        num_examples: examples in those pieces.
        schema: what each record holds (its parse spec).
        labelled: examples carry a class label.
        pack_length: the packed sequence length, when text was packed.
        dataset_fingerprint: the conversion's fingerprint (a re-conversion changes it).
        shards: every shard of the split as (file, examples, bytes), whichever host reads it.
        host: (input pipelines, this one's id): (1, 0) without an input context.
        host_examples: every host's examples, by id (equal within one, unless records hold
            blocks of documents).
        replicas: replicas this pipeline feeds, a batch each per step, dealt in turn (several
            GPUs of one host): an epoch is a whole number of steps.
    """

    kind: str
    pieces: tuple[tuple[str, int, int], ...]
    num_examples: int
    schema: Schema
    labelled: bool
    pack_length: int | None
    dataset_fingerprint: str
    shards: tuple[tuple[str, int, int], ...]
    host: tuple[int, int]
    host_examples: tuple[int, ...]
    replicas: int = 1


def view_split(spec: PipelineSpec, input_context: Any = None) -> SplitView:
    """The split `spec` names, as this host's pipeline reads it.

    Raises:
        DatasetError: not a feedgpu dataset, no such split, a tokenizer other than the one the
            spec names, or fewer shard files than input pipelines when records hold blocks.
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
    host = (1, 0)
    if input_context is not None and input_context.num_input_pipelines > 1:
        host = (input_context.num_input_pipelines, input_context.input_pipeline_id)
    shares = host_shares(split.shards, host[0])
    mine = shares[host[1]]
    if not all(sum(p.examples for p in share) for share in shares):
        raise DatasetError(
            f"the {spec.split!r} split's {split.num_examples} examples cannot feed {host[0]} "
            "input pipelines; convert more data or train on fewer workers"
        )
    return SplitView(
        kind=manifest.kind,
        pieces=tuple((storage.join(spec.data_dir, p.file), p.skip, p.take) for p in mine),
        num_examples=sum(p.examples for p in mine),
        schema=manifest.schema,
        labelled=manifest.labelled,
        pack_length=manifest.pack_length,
        dataset_fingerprint=manifest.fingerprint,
        shards=tuple((s.file, s.num_examples, s.num_bytes) for s in split.shards),
        host=host,
        host_examples=tuple(sum(p.examples for p in share) for share in shares),
        replicas=max(1, int(getattr(input_context, "num_replicas_in_sync", 1) or 1) // host[0]),
    )


def per_replica(spec: PipelineSpec, input_context: Any = None) -> PipelineSpec:
    """The spec with batch_size as each replica's share of it: a spec's batch_size is the
    global batch, as Keras and tf.distribute count it, and an input context's pipeline feeds
    one replica. The one rule for `build_pipeline`, `InputPosition` and bench-input.

    Raises:
        UsageError: the batch does not divide among the replicas.
    """
    replicas = int(getattr(input_context, "num_replicas_in_sync", 1) or 1)
    if replicas == 1:
        return spec
    if spec.batch_size % replicas:
        raise UsageError(
            f"batch_size {spec.batch_size} does not divide among {replicas} replicas; "
            f"use a multiple of {replicas} (it is the global batch)"
        )
    return spec.with_changes(batch_size=spec.batch_size // replicas)
