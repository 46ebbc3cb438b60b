"""feedgpu's compiled steps for text conversion, where the package was built with them.

Two small C extensions, built by setup.py: `_wordpiece` (WordPiece ids of texts, characters
beyond ASCII by a table of HF's answers, and of JSON lines parsed in the same pass:
`plain_wordpiece`, `char_table`) and `_records` (a batch's records serialized and framed by
shard in one call: `records`; documents' names and their shards: `names`; line bounds:
`raw_lines`). Each gives the same bytes as the Python reference it replaces (HF's ids,
`format.records`), faster (benchmarks/RESULTS.md, "Text conversion").
Without a C compiler at install the package installs without them, HF tokenizes every text
and the run says so (`TextTokenizer.road`); FEEDGPU_NO_NATIVE=1 does the same, for comparing
or ruling them out.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

NO_NATIVE_ENV = "FEEDGPU_NO_NATIVE"
STEPS = ("_wordpiece", "_records")


def native_module(name: str, honour_env: bool = True) -> ModuleType | None:
    """The compiled step `name` (one of STEPS), or None: not built here, or (honour_env)
    turned off by FEEDGPU_NO_NATIVE."""
    if name not in STEPS:
        raise ValueError(f"no compiled step {name!r}")
    if honour_env and os.environ.get(NO_NATIVE_ENV, "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(f"feedgpu.converters.text.{name}")
    except ImportError:
        return None
