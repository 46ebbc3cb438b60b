"""Types of the compiled step `_records.c` (see native.py, examples.py and framed.py)."""

from collections.abc import Sequence
from typing import Any

def examples(
    ids: Any,
    sizes: Any,
    doc_ids: Sequence[str | bytes],
    labels: Any,
    per_record: Any,
    before: Any = ...,
    after: Any = ...,
    starts: Any = ...,
) -> list[bytes]: ...
def numbered(prefix: str, numbers: Any) -> list[str]: ...
def line_ends(data: bytes, size: int = -1) -> bytes: ...
def route(ids: Sequence[str | bytes], k0: int, k1: int, buckets: int) -> bytes: ...
def frame(records: Sequence[bytes]) -> bytes: ...
def crc32c(data: bytes, hardware: bool) -> int: ...
def shard_records(
    ids: Any,  # int64 ids, or (varints: bytes, each document's bytes, unknown ids: int64)
    lengths: Any,
    numbers: Any,
    prefixes: Sequence[str],
    runs: Any,
    before: Any,
    after: Any,
    budget: int,
    unk_id: int,
    per_record: int,
    record_ids: int,
    record_docs: int,
    k0: int,
    k1: int,
    count: int,
) -> tuple[bytes, bytes, bytes, tuple[int, int], bytes, bytes, bytes, bytes]: ...
