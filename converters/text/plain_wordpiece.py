"""WordPiece ids of plain texts by feedgpu's own compiled step (`_wordpiece.c`), when built.

Most of a real corpus is plain text (printable ASCII, tab, CR, LF). For it BERT's normaliser
is at most ASCII lowercasing and its pre-tokenizer a split at whitespace and punctuation, so
the ids come straight from the texts' bytes, without the GIL, at several times
tensorflow-text's speed: that op also makes every token's string and offsets, which nobody
reads, and needs the texts copied into a tensor first (benchmarks/RESULTS.md, "Issue 29, fifth
session"). In other texts, the chunks between ASCII whitespace that are plain (most of them)
are tokenized here too; the rest are left to tensorflow-text and HF, as before.

Where the step is not built, or FEEDGPU_NO_NATIVE=1 is set, tensorflow-text takes every text
(`native`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

# A run of JSON lines parsed and tokenized at once (`PlainWordPiece.lines_of`, its field and
# triggers given), from bytes and their lines' bounds (line i is data[ends[i]:ends[i + 1]],
# `raw_lines.RawLines`): the ids of the documents it took, their counts, which lines they
# are, and the lines it left to the caller (int64 numpy).
LineIds = Callable[[bytes, Any], tuple[Any, Any, Any, Any]]


class PlainWordPiece:
    """A vocabulary's ids of plain text, exactly HF's BERT WordPiece (its normaliser and
    pre-tokenizer included); chunks that are not plain are reported, not tokenized."""

    def __init__(
        self,
        module: ModuleType,
        tokens: list[str],
        prefix: str,
        unknown_id: int,
        max_chars: int,
        lowercase: bool,
    ) -> None:
        """tokens: the vocabulary in id order; prefix: continuing pieces' ("##");
        max_chars: a longer word is unknown_id whole (HF's max_input_chars_per_word)."""
        self._module = module
        self._vocab = module.build(tokens, prefix, unknown_id, max_chars, lowercase)

    def ids(self, texts: Sequence[str]) -> tuple[Any, Any, Any]:
        """The texts' ids concatenated and each text's count (int64 numpy), but for the holes:
        each chunk between ASCII whitespace that is not plain, as rows (text, start, end,
        where its ids go among the output's), int64 numpy of shape (holes, 4). WordPiece
        never crosses whitespace, so a chunk's ids are the same alone or in its text."""
        import numpy as np

        values, lengths, holes = self._module.tokenize(self._vocab, texts)
        return (
            np.frombuffer(values, np.int64),
            np.frombuffer(lengths, np.int64),
            np.frombuffer(holes, np.int64).reshape(-1, 4),
        )

    def lines_of(self, field: str, triggers: str) -> LineIds | None:
        """JSON lines parsed and tokenized at once, for one text field and one set of
        triggers (encoded once for every batch): a function of a block's bytes and its lines'
        bounds (`LineIds`) that tokenizes, in one pass without the GIL, the documents that are
        certain and plain (`_json_line.h`: valid ASCII JSON objects whose text field is a
        plain, non-blank string) and gives their ids concatenated, each one's count, which
        lines they are, and which lines are left to the caller (any other line but a blank
        one, and texts holding a character of triggers), all int64 numpy. None for a field no
        line can name as UTF-8 (a surrogate from undecodable arguments): Python's path reads
        those."""
        import numpy as np

        try:
            name = field.encode()
        except UnicodeEncodeError:
            return None
        stop = "".join(c for c in triggers if c.isascii()).encode()

        def ids(data: bytes, ends: Any) -> tuple[Any, Any, Any, Any]:
            found = self._module.lines(self._vocab, data, ends, name, stop)
            return tuple(np.frombuffer(part, np.int64) for part in found)  # type: ignore[return-value]

        return ids
