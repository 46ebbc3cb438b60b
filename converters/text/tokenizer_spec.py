"""What `--tokenizer` asked for: a tokenizer.json, a vocab.txt, or a vocabulary to train."""

from __future__ import annotations

import os
from dataclasses import dataclass

from feedgpu.errors import UsageError


@dataclass(frozen=True)
class TokenizerSpec:
    """What `--tokenizer` asked for.

    Attributes:
        kind: "file" (tokenizer.json), "vocab" (vocab.txt) or "train".
        path: the file, for file and vocab.
        model: "wordpiece" or "bpe", for train.
        vocab_size: for train.
        lowercase: for vocab and trained WordPiece.
    """

    kind: str
    path: str | None = None
    model: str | None = None
    vocab_size: int = 0
    lowercase: bool = True

    @classmethod
    def parse(cls, text: str, lowercase: bool = True) -> TokenizerSpec:
        """`path/tokenizer.json`, `path/vocab.txt`, or `train:wordpiece|bpe:SIZE`."""
        if text.startswith("train:"):
            parts = text.split(":")
            if len(parts) != 3 or parts[1] not in ("wordpiece", "bpe") or not parts[2].isdigit():
                raise UsageError(
                    f"--tokenizer {text!r}: use train:wordpiece:SIZE or train:bpe:SIZE"
                )
            if int(parts[2]) < 100:
                raise UsageError(f"--tokenizer {text!r}: a vocabulary needs at least 100 entries")
            return cls("train", model=parts[1], vocab_size=int(parts[2]), lowercase=lowercase)
        if not os.path.isfile(text):
            raise UsageError(
                f"--tokenizer {text}: no such file (give tokenizer.json, vocab.txt "
                "or train:wordpiece:SIZE)"
            )
        return cls("file" if text.endswith(".json") else "vocab", path=text, lowercase=lowercase)
