"""`feedgpu verify`: re-read a converted dataset and check it against its manifest."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from feedgpu import storage
from feedgpu.format import names
from feedgpu.format.index import read_index
from feedgpu.format.manifest import read_manifest
from feedgpu.format.records import RecordError, block_documents, decode_example, read_records
from feedgpu.progress import progress_bar


@dataclass
class VerifyReport:
    """Problems found, each naming the file and, where it applies, the record index."""

    out_dir: str
    num_shards: int = 0
    num_records: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form."""
        return {**self.__dict__, "ok": self.ok}


def _check_image(data: bytes) -> str | None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
    except Exception as e:  # any decoder failure is a finding, not a crash
        return f"image does not decode ({e})"
    return None


def verify_dataset(out_dir: str, *, decode: bool = False, quiet: bool = True) -> VerifyReport:
    """Read every record (CRCs checked), compare counts with the manifest, optionally decode.

    Raises:
        DatasetError: out_dir has no readable manifest.
    """
    manifest = read_manifest(out_dir)
    report = VerifyReport(out_dir)
    images = [f.name for f in manifest.features if f.kind == "image"]
    blocks = manifest.schema.blocks
    shards = [s for split in manifest.splits.values() for s in split.shards]
    listed = {s.file for s in shards}
    for name in storage.listdir(out_dir):
        if names.is_shard_filename(name) and name not in listed:
            report.problems.append(f"{name}: shard file not listed in {names.MANIFEST}")
    bar = progress_bar(sum(s.num_bytes for s in shards), unit="B", unit_scale=True, disable=quiet)
    for shard in shards:
        path = storage.join(out_dir, shard.file)
        report.num_shards += 1
        if not storage.exists(path):
            report.problems.append(f"{shard.file}: missing")
            continue
        count, documents, damaged = 0, 0, False
        entries: list[tuple[int, int]] = []  # each record's offset and framed length
        with storage.open_file(path, "rb") as f:
            try:
                for count, record in enumerate(read_records(f), 1):
                    start = entries[-1][0] + entries[-1][1] if entries else 0
                    entries.append((start, len(record) + 16))
                    bar.update(len(record) + 16)
                    if decode:
                        problem, held = _check_record(record, images, blocks)
                        documents += held
                        if problem:
                            report.problems.append(f"{shard.file}: record {count - 1}: {problem}")
            except RecordError as e:
                report.problems.append(f"{shard.file}: {e}")
                damaged = True
        report.num_records += count
        if count != shard.num_records and not damaged:
            report.problems.append(
                f"{shard.file}: {count} records readable, manifest says {shard.num_records}"
            )
        elif decode and blocks and documents != shard.num_examples:
            report.problems.append(
                f"{shard.file}: {documents} documents in its blocks, manifest says "
                f"{shard.num_examples}"
            )
        if shard.index and not damaged:
            report.problems += _check_index(out_dir, shard.index, entries)
    bar.close()
    return report


def _check_index(out_dir: str, name: str, entries: list[tuple[int, int]]) -> list[str]:
    """Problems with a shard's record index, against the records as read."""
    path = storage.join(out_dir, name)
    if not storage.exists(path):
        return [f"{name}: index missing (feedgpu index OUT writes it)"]
    try:
        listed = read_index(path)
    except ValueError as e:
        return [f"{name}: not an index of OFFSET LENGTH lines ({e})"]
    if listed == entries:
        return []
    pairs = zip(listed, entries, strict=False)  # of unequal lengths: the shorter decides
    wrong = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
    if wrong is None:
        return [f"{name}: {len(listed)} entries for {len(entries)} records"]
    return [f"{name}: entry {wrong} says {listed[wrong]}, the record is at {entries[wrong]}"]


def _check_record(record: bytes, image_features: list[str], blocks: bool) -> tuple[str | None, int]:
    """What is wrong with a record, if anything, and the examples it holds (a block's
    documents, whose lengths must add up to its ids)."""
    try:
        example = decode_example(record)
    except ValueError as e:
        return f"not a valid tf.train.Example ({e})", 0
    try:
        held = len(block_documents(example)) if blocks else 1
    except ValueError as e:
        return str(e), 0
    for name in image_features:
        values = example.get(name) or [b""]
        problem = _check_image(values[0] if isinstance(values[0], bytes) else b"")
        if problem:
            return problem, held
    return None, held
