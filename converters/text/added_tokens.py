"""A tokenizer's added tokens as documents may hold them: HF finds them before it splits a
text, the compiled step does not, so a text that may hold one is HF's, whole."""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AddedTokens:
    """A tokenizer's added tokens ([CLS], [SEP], words added to it) as they may appear in
    documents: HF finds them before splitting, the compiled step splits them like any text, so a
    text that may hold one goes to HF whole.

    HF matches a token added with normalized=False in the raw text, one with normalized=True
    in the normalised text. For plain text (printable ASCII, tab, CR, LF) normalising only
    lowercases and makes tab, CR and LF spaces: the search ignores case and takes any of
    those for a space. For other texts it may do more (accents, compatibility characters),
    so with any normalized token they all go to HF.

    Attributes:
        firsts: the tokens' first characters, as written and in either case.
        pattern: a search for any of them in plain text.
        normalized: whether any is matched in the normalised text.
        contents: the tokens' texts (and a normalized token's normal form).
    """

    firsts: str
    pattern: re.Pattern[str]
    normalized: bool
    contents: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, config: dict[str, Any], normalize: Callable[[str], str] | None = None
    ) -> AddedTokens | None:
        """A tokenizer.json's added tokens (normalize: its normaliser, which HF applies to a
        normalized token's own text too: "café" added to an uncased tokenizer is matched as
        "cafe"); None when it has none."""
        added = [t for t in config.get("added_tokens") or [] if t["content"]]
        if not added:
            return None
        variants: set[tuple[str, bool]] = set()
        for token in added:
            normalized = token.get("normalized", True)
            variants.add((token["content"], normalized))
            if normalized and normalize is not None and normalize(token["content"]):
                variants.add((normalize(token["content"]), True))
        # Grouped by first character, written as it is when uncased ("[SEP]": "[", then the
        # rest in any case), so the search skips ahead to it at C speed.
        groups: dict[str, list[str]] = {}
        for text, normalized in sorted(variants, key=lambda v: (-len(v[0]), v)):
            first = _pattern_char(text[0], normalized)
            body = "".join(_pattern_char(c, normalized) for c in text[1:])
            if first == re.escape(text[0]):
                first = (
                    f"[{re.escape(''.join(sorted({text[0], text[0].lower(), text[0].upper()})))}]"
                )
            groups.setdefault(first, []).append(body)
        firsts = {
            c
            for text, normalized in variants
            for c in (
                " \t\n\r"
                if normalized and text[0] in " \t\n\r"
                else (text[0], text[0].lower(), text[0].upper())
            )
        }
        pattern = "|".join(f"{first}(?i:{'|'.join(rests)})" for first, rests in groups.items())
        normalized = any(t.get("normalized", True) for t in added)
        contents = tuple(sorted(text for text, _ in variants))
        return cls("".join(sorted(firsts)), re.compile(pattern), normalized, contents)

    def find(self, texts: Sequence[str]) -> list[int]:
        """Which texts may hold one. The batch is searched joined, first for the first
        characters alone: a pattern search of every batch cost 12% of tokenizing short text."""
        if not texts:
            return []
        found: set[int] = set()
        if self.normalized:
            found.update(i for i, text in enumerate(texts) if _NOT_PLAIN.search(text))
        joined = "\0".join(texts)
        if any(first in joined for first in self.firsts):
            starts = [m.start() for m in self.pattern.finditer(joined)]
            if starts:
                ends = list(itertools.accumulate(len(text) + 1 for text in texts))
                found.update(bisect.bisect_right(ends, start) for start in starts)
        return sorted(found)


def _pattern_char(c: str, normalized: bool) -> str:
    """A token's character in the search: for a normalized token, a space, tab, LF or CR is
    any of them (HF's normaliser makes them spaces); else the character as written."""
    return "[ \t\n\r]" if normalized and c in " \t\n\r" else re.escape(c)


# What plain text (printable ASCII, tab, CR, LF) cannot hold.
_NOT_PLAIN = re.compile(r"[^\x20-\x7e\t\n\r]")
