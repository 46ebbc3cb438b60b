"""Which id pads a text dataset: its tokenizer.json's pad token, looked up as packers did.

Kept apart from `manifest` (which records the id): the converter chooses it from a tokenizer,
and a format-1 manifest, written before the id was recorded, recovers it the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from feedgpu import storage

# Pad tokens, in the order looked for; version-1 packing took the first two (else id 0).
PAD_TOKENS = ("[PAD]", "<pad>", "<|pad|>")


def pad_token_id(config: Mapping[str, Any], tokens: Sequence[str] = PAD_TOKENS) -> int | None:
    """The id of the first of tokens a `tokenizer.json` document knows, if any."""
    added = {t.get("content"): t.get("id") for t in config.get("added_tokens") or ()}
    vocab = (config.get("model") or {}).get("vocab")
    for token in tokens:
        found = added.get(token)
        if found is None and isinstance(vocab, dict):
            found = vocab.get(token)
        if found is not None:
            return int(found)
    return None


def legacy_pad_id(out_dir: str) -> int:
    """Format 1 packed with `[PAD]`, else `<pad>`, else id 0: the same rule, read back."""
    try:
        config = json.loads(storage.read_bytes(storage.join(out_dir, "tokenizer.json")))
    except (OSError, ValueError):
        return 0
    return pad_token_id(config, PAD_TOKENS[:1]) or pad_token_id(config, PAD_TOKENS[1:2]) or 0
