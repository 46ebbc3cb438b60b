"""The process's existing objects kept out of garbage collection while a conversion runs."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def heap_frozen() -> Iterator[None]:
    """Keep the objects that exist now (TensorFlow's, a notebook's) out of garbage collection
    until the block ends; converters run inside it.

    A conversion allocates millions of short-lived objects, so collections come often, and a
    full one traverses every object in the process, TensorFlow's included: a real share of a
    short-document text conversion (benchmarks/RESULTS.md, "Conversion speed tricks"). Frozen
    objects are not scanned, and young collections are made rarer; both are undone after,
    unless the caller had frozen objects itself.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], 20_000), *thresholds[1:])  # young ones: rarer too
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
