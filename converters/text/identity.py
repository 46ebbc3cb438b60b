"""A tokenizer's identity: the SHA-256 of its config as canonical JSON (`json.dumps` with sorted
keys, not ASCII-escaped), made a slice of a large object or array at a time.

One `json.dumps` call holds the GIL throughout: 4-6 ms for an 8k vocabulary, 34 ms for a
30k one (BERT's), while the identity is made on the parity check's thread beside the
tokenizer threads, which then waited to start and end their batches. In slices of
SLICE items the GIL is let go between them; the text, and so every identity, is the same
(benchmarks/RESULTS.md, "Issue 29, eleventh session"). A dict's keys are sorted once, alone
(sorting its items compares tuples: 2.8 ms of an 8k vocabulary's 5.7, the keys 1.4), and a
slice without a dict, list or tuple in it is written in that order, unsorted again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

SLICE = 512


def content_hash(value: Any) -> str:
    """sha256(json.dumps(value, sort_keys=True, ensure_ascii=False)) as hex, for JSON values
    (dicts with str keys, lists, str, numbers, bools, None)."""
    digest = hashlib.sha256()
    for piece in _pieces(value):
        digest.update(piece.encode())
    return digest.hexdigest()


def _dumps(value: Any, sort_keys: bool = True) -> str:
    return json.dumps(value, sort_keys=sort_keys, ensure_ascii=False)


def _flat(values: Any) -> bool:
    """No dict, list or tuple (nor a subclass) among values: nothing in them has keys to
    sort."""
    return not any(issubclass(kind, (dict, list, tuple)) for kind in set(map(type, values)))


def _pieces(value: Any) -> Iterator[str]:
    """`_dumps(value)` in pieces whose concatenation is exactly it."""
    if isinstance(value, dict) and value:
        if type(value) is not dict:  # its items as json reads them (a subclass may differ)
            value = dict(value.items())
        keys = sorted(value)  # the order of sorted(items()): keys are unique
        yield "{"
        for start in range(0, len(keys), SLICE):
            part = {key: value[key] for key in keys[start : start + SLICE]}  # in key order
            if start:
                yield ", "
            if _flat(part.values()):  # a slice in one call, its braces dropped
                yield _dumps(part, sort_keys=False)[1:-1]
                continue
            for i, (key, item) in enumerate(part.items()):
                yield (", " if i else "") + _dumps(key) + ": "
                yield from _pieces(item)
        yield "}"
    elif isinstance(value, list) and value:
        if type(value) is not list:  # its items as json reads them (a subclass may differ)
            value = list(value)
        yield "["
        for start in range(0, len(value), SLICE):
            part = value[start : start + SLICE]
            if start:
                yield ", "
            if _flat(part):
                yield _dumps(part)[1:-1]
                continue
            for i, item in enumerate(part):
                if i:
                    yield ", "
                yield from _pieces(item)
        yield "]"
    else:
        yield _dumps(value)
