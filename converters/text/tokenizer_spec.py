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
        lowercase: fold case and strip accents, for vocab and trained WordPiece.
    """

    kind: str
    path: str | None = None
    model: str | None = None
    vocab_size: int = 0
    lowercase: bool = True

    @classmethod
    def parse(cls, text: str, lowercase: bool | None = None) -> TokenizerSpec:
        """`path/tokenizer.json`, `path/vocab.txt`, or `train:wordpiece|bpe:SIZE`.

        lowercase None decides: a trained WordPiece vocabulary keeps case and accents (a
        multilingual corpus keeps "Příliš" and "Мой ёжик" as written, and the vocabulary
        learns both cases); a vocab.txt is uncased unless one of its tokens has a capital (a
        cased vocabulary's tokens do, an uncased one's never); a tokenizer.json's own
        normaliser decides, as does BPE's byte level (True, unused)."""
        if text.startswith("train:"):
            parts = text.split(":")
            if len(parts) != 3 or parts[1] not in ("wordpiece", "bpe") or not parts[2].isdigit():
                raise UsageError(
                    f"--tokenizer {text!r}: use train:wordpiece:SIZE or train:bpe:SIZE"
                )
            if int(parts[2]) < 100:
                raise UsageError(f"--tokenizer {text!r}: a vocabulary needs at least 100 entries")
            if lowercase is None:  # BPE's byte-level vocabulary never folds: True, unused
                lowercase = parts[1] != "wordpiece"
            return cls("train", model=parts[1], vocab_size=int(parts[2]), lowercase=lowercase)
        if not os.path.isfile(text):
            raise UsageError(
                f"--tokenizer {text}: no such file (give tokenizer.json, vocab.txt "
                "or train:wordpiece:SIZE)"
            )
        kind = "file" if text.endswith(".json") else "vocab"
        if lowercase is None:
            lowercase = kind == "file" or not _cased(text)
        return cls(kind, path=text, lowercase=lowercase)


def _cased(vocab_txt: str) -> bool:
    """Whether a vocab.txt has a token with a capital letter (special tokens, "[CLS]", aside)."""
    try:
        with open(vocab_txt, encoding="utf-8", errors="replace") as f:
            return any(
                t != t.lower() and not (t.startswith("[") and t.endswith("]"))
                for t in (line.strip() for line in f)
            )
    except OSError:  # said when it is loaded
        return False
