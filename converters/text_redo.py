"""Which text the fast WordPiece path may tokenize differently from HF, decided word by word.

tensorflow-text normalises with NFKD and full case folding, HF (the reference) with NFD and
lower(); both drop control characters, and they count a word's length limit in different
units. Each of those differences is a property of one character or one word. And both split
a text at whitespace before anything else (tab, CR, LF and space are whitespace to both, never
removed), so a text's ids are its words' ids in order: a text with one odd word ("…" in a
sentence, a ligature, a zero-width space) needs HF for that word only, not for the whole text.
HF tokenizes ~0.27 M tokens/s per core against ~10 M for the fast path: redoing whole texts
was the largest cost of converting real-like text (benchmarks/RESULTS.md, issue 16).
"""

from __future__ import annotations

import functools
import re
import unicodedata

# Words of 26 characters or more (26 can exceed 100 UTF-8 bytes), matched from their start
# only: without the look-behind the search retries at each character (24 vs 13 us a document).
_LONG_WORD = re.compile(r"(?<!\S)\S{26,}")
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Whitespace to both tokenizers (unlike \x0b, \x0c, \x1c-\x1f: HF drops those as controls).
_ASCII_SPACE = re.compile(r"[ \t\n\r]+")


@functools.cache
def _odd_char(char: str, lowercase: bool) -> bool:
    """A character the two paths may normalise differently: decided once per character."""
    if unicodedata.category(char)[0] == "C" and char not in "\t\n\r":
        return True  # BERT's normaliser drops control and format characters
    return lowercase and (
        char == "Σ"  # lower() gives a final sigma by context, case folding never does
        or char.lower() != char.casefold()
        or unicodedata.normalize("NFKD", char) != unicodedata.normalize("NFD", char)
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
