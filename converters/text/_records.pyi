"""Types of the compiled step `_records.c` (see native.py and examples.py)."""

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
def line_ends(data: bytes) -> bytes: ...
def route(ids: Sequence[str | bytes], k0: int, k1: int, buckets: int) -> bytes: ...
def frame(records: Sequence[bytes]) -> bytes: ...
def crc32c(data: bytes, hardware: bool) -> int: ...
