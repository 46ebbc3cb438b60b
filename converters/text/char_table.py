"""Characters beyond ASCII for the compiled WordPiece step, learned from the tokenizer itself.

HF's BERT normaliser maps each character on its own (it drops controls, makes whitespace a
space, pads CJK ideographs with spaces, strips accents by NFD and lowercases character by
character), and its pre-tokenizer splits at whitespace and punctuation, again character by
character. So what a character does in any text is what HF does with it alone: it is part of
a word (as its normal form), a word alone (punctuation, an ideograph), a boundary, or nothing.
The compiled step (`_wordpiece.c`) looks each character up in a table of those answers; a
chunk with a character the table lacks is left to HF,
and its characters are learned for the texts after it. Asking HF makes the table exact by
construction, whatever Unicode version HF's tables follow.

Where one character's answer could depend on its neighbours it is never put in the table:
NFD reorders combining marks, so a mark that stripping accents keeps (a non-starter not in
category Mn) is left out, and so is a normal form of more characters than the character has
bytes, or more than three times its bytes (the step's buffers are sized by the text's).
"""

from __future__ import annotations

import struct
import threading
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

# A character's kind in the table (`_wordpiece.h`): part of a word, a word alone, a boundary,
# dropped.
WORD, ALONE, SPACE, DROP = 1, 2, 3, 4

# What a character is to the step: its kind and its normal form (UTF-8), or None if the table
# cannot hold it.
Entry = tuple[int, bytes] | None
# An entry packed for the compiled table (`_chars.c`): code point, kind, the form's length and
# the form, padded. A table is rebuilt whenever a batch brings a new character (in CJK text,
# for many batches): from a list of tuples that took 3.3 ms at 20k characters, packed 0.2.
_ENTRY = struct.Struct("<IBB12s")


def describer(hf: Any, strips_accents: bool) -> Callable[[str], Entry]:
    """A function of one character: its `Entry`, by HF's normaliser and pre-tokenizer."""
    normalizer, pre_tokenizer = hf.normalizer, hf.pre_tokenizer

    def describe(char: str) -> Entry:
        if 0xD800 <= ord(char) <= 0xDFFF or ord(char) < 0x80:
            return None  # a lone surrogate (no UTF-8); ASCII is the step's own
        out = normalizer.normalize_str(char) if normalizer is not None else char
        if not out:
            return DROP, b""
        if unicodedata.category(char) == "Cn":
            return None  # newer than Python's tables: what NFD does with it is unknown here
        pieces = [piece for piece, _ in pre_tokenizer.pre_tokenize_str(f"a{out}a")]
        core = out.strip(" ")
        if not core:
            return (SPACE, b"") if pieces == ["a", "a"] else None
        form, size = core.encode(), len(char.encode())
        if len(core) > size or len(form) > 3 * size:
            return None  # longer than the step's buffers allow (sized by the text's bytes)
        if strips_accents and any(unicodedata.combining(c) for c in core):
            return None  # a kept mark: NFD could move it past its neighbours' marks
        if out == core and pieces == [f"a{out}a"]:
            return WORD, form
        if len(core) == 1 and pieces == ["a", core, "a"]:
            return ALONE, form
        return None

    return describe


class CharTable:
    """The step's table of characters, grown as texts bring new ones (thread-safe).

    `table` is the current compiled table (None until a character is learned): a new one
    replaces it whole, so a call already running keeps the one it was given.
    """

    def __init__(self, build: Callable[[bytes], Any], describe: Callable[[str], Entry]) -> None:
        self._build, self._describe = build, describe
        self._known: dict[str, tuple[int, bytes]] = {}
        self._lacking: set[str] = set()  # characters the table cannot hold
        self._packed = bytearray()  # every known entry, as the compiled table takes them
        self._lock = threading.Lock()
        self.table: Any = None

    def learn(self, chars: Iterable[str]) -> bool:
        """Characters beyond ASCII the table has not seen, described and taken in; whether
        any was taken (texts left for lacking one may now be tokenized by the step)."""
        new = {c for c in chars if c >= "\x80" and c not in self._known and c not in self._lacking}
        if not new:
            return False
        with self._lock:  # another thread may have learned some meanwhile
            taken = False
            for char in sorted(new - self._known.keys() - self._lacking):
                entry = self._describe(char)
                if entry is None:
                    self._lacking.add(char)
                else:  # packed first: an entry that cannot be packed is not known either
                    self._packed += _ENTRY.pack(ord(char), entry[0], len(entry[1]), entry[1])
                    self._known[char] = entry
                    taken = True
            if taken:  # a new table, whole: calls running keep the one they were given
                self.table = self._build(bytes(self._packed))
            return any(c in self._known for c in new)
