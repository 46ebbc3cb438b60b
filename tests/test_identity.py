"""A tokenizer's identity is the hash of `json.dumps(config, sort_keys=True,
ensure_ascii=False)`, byte for byte: datasets converted before keep theirs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer


def whole(value: Any) -> str:
    return hashlib.sha256(
        json.dumps(value, sort_keys=True, ensure_ascii=False).encode()
    ).hexdigest()


def test_a_wordpiece_tokenizers_identity_is_unchanged(tmp_path: Path) -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", *(f"w{i}" for i in range(3000))]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = load_tokenizer(TokenizerSpec.parse(str(tmp_path / "vocab.txt")))
    assert tok.identity == whole(tok.config)


def test_a_bpe_tokenizers_identity_is_unchanged(tmp_path: Path) -> None:
    texts = [f"the {i} quick brown fox {i * 7} jumps" for i in range(400)]
    tok = load_tokenizer(TokenizerSpec.parse("train:bpe:600"), texts)
    assert isinstance(tok.config["model"]["merges"], list) and tok.config["model"]["merges"]
    assert tok.identity == whole(tok.config)
