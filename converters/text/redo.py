"""Which text the fast WordPiece path may tokenize differently from HF, decided word by word.

tensorflow-text normalises with NFKD and full case folding, HF (the reference) with NFD and
lower(); both drop control characters, and they count a word's length limit in different
units. Each of those differences is a property of one character or one word. And both split
a text at whitespace before anything else (tab, CR, LF and space are whitespace to both, never
removed), so a text's ids are its words' ids in order: a text with one odd word ("…" in a
sentence, a ligature, a zero-width space) needs HF for that word only, not for the whole text.
HF tokenizes far slower than the fast path: redoing whole texts was the largest cost of
converting real-like text (benchmarks/RESULTS.md, "Issue 16").
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Words of 26 characters or more (26 can exceed 100 UTF-8 bytes), matched from their start
# only: without the look-behind the search retries at each character.
_LONG_WORD = re.compile(r"(?<!\S)\S{26,}")
_PLAIN_CHARS = r"\t\n\r\x20-\x7e"  # an RE2 class's ASCII without controls: never redone
PLAIN_ASCII = f"[{_PLAIN_CHARS}]*"
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Whitespace to both tokenizers (unlike \x0b, \x0c, \x1c-\x1f: HF drops those as controls).
_ASCII_SPACE = re.compile(r"[ \t\n\r]+")


@functools.cache
def _odd_char(char: str, lowercase: bool) -> bool:
    """A character the two paths may normalise differently: decided once per character."""
    if (unicodedata.category(char)[0] == "C" and char not in "\t\n\r") or char == "\ufffd":
        return True  # BERT's normaliser drops control and format characters, and U+FFFD
    if char >= "\x80" and (
        _hf_normal(char, lowercase) != _unicode_normal(char, lowercase)
        or _hf_splits(char) != unicodedata.category(char).startswith("P")
    ):
        return True  # HF's Unicode tables are older than Python's (and tensorflow-text's)
    return lowercase and (
        char == "Σ"  # lower() gives a final sigma by context, case folding never does
        or char.lower() != char.casefold()
        or unicodedata.normalize("NFKD", char) != unicodedata.normalize("NFD", char)
    )


@functools.cache
def _hf_bert_normalizer(lowercase: bool) -> Any:
    from tokenizers.normalizers import BertNormalizer

    return BertNormalizer(strip_accents=lowercase, lowercase=lowercase)


def _hf_normal(char: str, lowercase: bool) -> str:
    """HF's BERT normaliser on the character alone."""
    return str(_hf_bert_normalizer(lowercase).normalize_str(char))


@functools.cache
def _hf_bert_pre_tokenizer() -> Any:
    from tokenizers.pre_tokenizers import BertPreTokenizer

    return BertPreTokenizer()


def _hf_splits(char: str) -> bool:
    """Whether HF's BERT pre-tokenizer makes the character a word of its own (punctuation)."""
    return len(_hf_bert_pre_tokenizer().pre_tokenize_str(f"a{char}a")) == 3


def _unicode_normal(char: str, lowercase: bool) -> str:
    """What HF's BERT normaliser would make of a character that is not a control by Python's
    Unicode tables (which tensorflow-text's follow more closely than HF's): a space,
    an ideograph between spaces, or its accents stripped (NFD, marks dropped) and lowercased.
    Where HF differs (a mark or letter newer than its tables: it keeps or drops it), the two
    paths would too."""
    if char.isspace():
        return " "
    if is_cjk(ord(char)):
        return f" {char} "
    if not lowercase:
        return char
    kept = "".join(c for c in unicodedata.normalize("NFD", char) if unicodedata.category(c) != "Mn")
    return kept.lower()


def is_cjk(code: int) -> bool:
    """Whether HF's BERT normaliser puts spaces around this code point (its
    `handle_chinese_chars`: `is_chinese_char` in tokenizers' bert.rs, these bounds)."""
    return any(low <= code <= high for low, high in _CJK)


_CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def needs_reference(text: str, lowercase: bool) -> bool:
    """True for a text (or word) the fast path might tokenize differently from HF."""
    if text.isascii():
        return _ASCII_CONTROL.search(text) is not None
    if any(_odd_char(char, lowercase) for char in set(text)):
        return True
    # HF counts a word's limit in characters, tensorflow-text in bytes.
    return any(len(w) <= 100 < len(w.encode("utf-8")) for w in _LONG_WORD.findall(text))


def word_runs(text: str, lowercase: bool) -> list[tuple[bool, str]]:
    """The text as runs of words, each (needs HF, the run's words joined by spaces).

    Runs alternate: the fast path tokenizes the fine ones, HF the others, and their ids
    concatenated in order are the text's.
    """
    runs: list[tuple[bool, str]] = []
    fine: list[str] = []
    for word in _ASCII_SPACE.split(text):
        if not word:
            continue
        if needs_reference(word, lowercase):
            if fine:
                runs.append((False, " ".join(fine)))
                fine = []
            runs.append((True, word))
        else:
            fine.append(word)
    if fine:
        runs.append((False, " ".join(fine)))
    return runs


# Blocks whose every character `_odd_char` clears (tested): taken whole, unchecked. CJK
# ideographs and Hangul syllables: tens of thousands of characters, too many to check one by
# one each time the pattern is made.
FINE_BLOCKS = ((0x4E00, 0x9FFF), (0xAC00, 0xD7A3))
# Blocks of the common scripts, checked character by character when the pattern is made
# (a few thousand characters): Latin-1 and Latin Extended, Greek, Cyrillic, Hebrew, Arabic,
# Indic scripts, Latin Extended Additional, general punctuation and currency, CJK symbols and
# kana, emoji.
CHECKED_BLOCKS = (
    (0xA0, 0x24F),
    (0x370, 0x52F),
    (0x590, 0x6FF),
    (0x900, 0xDFF),
    (0x1E00, 0x20CF),
    (0x3000, 0x30FF),
    (0x1F300, 0x1FAFF),
)
# Texts RE2 matches here may hold a word over 100 UTF-8 bytes (RE2's \S takes every non-ASCII
# character: more than Python's, so more texts go to the Python check, never fewer).
_LONG_WORD_RE2 = r"(?s).*\S{26}.*"


@functools.cache
def fine_text_pattern(lowercase: bool) -> str:
    """An RE2 pattern that texts match whole when no character is odd (`_odd_char`): ASCII
    without controls, and the characters of the common scripts that are not odd.

    The tokenizer graph tests each text that is not plain ASCII against it, so a corpus in
    another script (or with accents, or "東京") is not checked in Python text by text: that
    check held the GIL for a large share of a real-like conversion (benchmarks/RESULTS.md,
    "Issue 16", "in-graph clearance").
    """
    points = [
        c for a, b in CHECKED_BLOCKS for c in range(a, b + 1) if not _odd_char(chr(c), lowercase)
    ]
    spans: list[list[int]] = []
    for c in sorted(points):
        if spans and spans[-1][1] == c - 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    spans += [[a, b] for a, b in FINE_BLOCKS]
    ranges = "".join(f"\\x{{{a:X}}}-\\x{{{b:X}}}" if a < b else f"\\x{{{a:X}}}" for a, b in spans)
    return f"[{_PLAIN_CHARS}{ranges}]*"


def cleared_in_graph(texts: Any, lowercase: bool) -> Any:
    """Which texts (a string tensor) `needs_reference` would pass, as far as RE2 can tell
    (bool tensor; False: unsure, check in Python). For use inside a graph."""
    import tensorflow as tf

    plain = tf.strings.regex_full_match(texts, PLAIN_ASCII)
    fine = tf.strings.regex_full_match(texts, fine_text_pattern(lowercase))
    long = tf.strings.regex_full_match(texts, _LONG_WORD_RE2)
    return plain | (fine & ~long)


@dataclass(frozen=True)
class AddedTokens:
    """A tokenizer's added tokens ([CLS], [SEP], words added to it) as they may appear in
    documents: HF finds them before splitting, the fast paths split them like any text, so a
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
    """

    firsts: str
    pattern: re.Pattern[str]
    normalized: bool

    @classmethod
    def of(cls, config: dict[str, Any]) -> AddedTokens | None:
        """A tokenizer.json's added tokens; None when it has none."""
        added = [t for t in config.get("added_tokens") or [] if t["content"]]
        if not added:
            return None
        # Grouped by first character, written as it is when uncased ("[SEP]": "[", then the
        # rest in any case), so the search skips ahead to it at C speed.
        groups: dict[str, list[str]] = {}
        for token in sorted(added, key=lambda t: len(t["content"]), reverse=True):
            first, rest = token["content"][0], token["content"][1:]
            space = "[ \t\n\r]" if token.get("normalized", True) else " "
            body = "".join(space if c in " \t\n\r" else re.escape(c) for c in rest)
            groups.setdefault(first, []).append(body)
        firsts = {c for first in groups for c in (first, first.lower(), first.upper())}
        pattern = "|".join(
            f"[{re.escape(''.join(sorted({f, f.lower(), f.upper()})))}](?i:{'|'.join(rests)})"
            for f, rests in groups.items()
        )
        normalized = any(t.get("normalized", True) for t in added)
        return cls("".join(sorted(firsts)), re.compile(pattern), normalized)

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


# What plain text (printable ASCII, tab, CR, LF) cannot hold.
_NOT_PLAIN = re.compile(r"[^\x20-\x7e\t\n\r]")
