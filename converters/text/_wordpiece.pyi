"""Types of the compiled step `_wordpiece.c` (see plain_wordpiece.py, char_table.py)."""

from collections.abc import Sequence
from typing import Any

def build(
    tokens: list[str], prefix: str, unknown_id: int, max_chars: int, lowercase: bool
) -> Any: ...
def chars(entries: bytes) -> Any: ...
def tokenize(vocabulary: Any, chars: Any, texts: Sequence[str]) -> tuple[bytes, bytes, bytes]: ...
def lines(
    vocabulary: Any,
    chars: Any,
    data: bytes,
    ends: Any,
    field: bytes,
    tokens: Sequence[bytes],
) -> tuple[bytes, bytes, bytes, bytes]: ...
