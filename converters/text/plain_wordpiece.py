"""WordPiece ids of texts by feedgpu's own compiled step (`_wordpiece.c`), when built.

Most of a real corpus is plain text (printable ASCII, tab, CR, LF). For it BERT's normaliser
is at most ASCII lowercasing and its pre-tokenizer a split at whitespace and punctuation, so
the ids come straight from the texts' bytes, without the GIL (benchmarks/RESULTS.md, "Text
conversion"). Characters beyond ASCII are looked up in a table learned from HF as they turn
up (`char_table`); a chunk between ASCII whitespace holding one the table lacks (or cannot
hold) is left to HF. Where the step is not built, or FEEDGPU_NO_NATIVE=1 is set, HF takes
every text (`native`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

from feedgpu.converters.text.char_table import CharTable, Entry

# A run of JSON lines parsed and tokenized at once (`PlainWordPiece.lines_of`, its field and
# added tokens given), from bytes and their lines' bounds (line i is data[ends[i]:ends[i + 1]],
# `raw_lines.RawLines`): the ids of the documents it took, their counts, which lines they are,
# and the lines it left to the caller (int64 numpy).
LineIds = Callable[..., tuple[Any, Any, Any, Any]]


class PlainWordPiece:
    """A vocabulary's ids of text, exactly HF's BERT WordPiece (its normaliser and
    pre-tokenizer included); chunks holding a character not (yet) covered are reported, not
    tokenized."""

    def __init__(
        self,
        module: ModuleType,
        tokens: list[str],
        prefix: str,
        unknown_id: int,
        max_chars: int,
        lowercase: bool,
        describe: Callable[[str], Entry] | None = None,
    ) -> None:
        """tokens: the vocabulary in id order; prefix: continuing pieces' ("##");
        max_chars: a longer word is unknown_id whole (HF's max_input_chars_per_word);
        describe: what a character beyond ASCII is to the tokenizer
        (`char_table.describer`), or None for plain texts only."""
        self._module = module
        self._vocab = module.build(tokens, prefix, unknown_id, max_chars, lowercase)
        self._chars = CharTable(module.chars, describe) if describe is not None else None

    def learn(self, chars: Iterable[str]) -> bool:
        """Characters of chunks the step left (holes) taken into its table where it can hold
        them; whether any now is (those chunks are worth tokenizing again)."""
        return self._chars is not None and self._chars.learn(chars)

    def _table(self) -> Any:
        return self._chars.table if self._chars is not None else None

    def ids(self, texts: Sequence[str]) -> tuple[Any, Any, Any]:
        """The texts' ids concatenated and each text's count (int64 numpy), but for the holes:
        each chunk between ASCII whitespace that is not plain or holds a character the table
        cannot hold, as rows (text, start, end, where its ids go among the output's), int64
        numpy of shape (holes, 4). WordPiece never crosses whitespace, so a chunk's ids are
        the same alone or in its text.

        Characters new to the table are learned from the holes, and the texts that had them
        tokenized again."""
        import numpy as np

        values, lengths, holes = self._tokenize(texts)
        rows = holes.tolist()
        if not rows or not self.learn(c for t, s, e, _ in rows for c in texts[t][s:e]):
            return values, lengths, holes
        again = np.unique(holes[:, 0])
        more, sizes, left = self._tokenize([texts[i] for i in again.tolist()])
        values, lengths = splice_ids(values, lengths, again.tolist(), per_text_ids(more, sizes))
        if len(left):  # from rows of the texts done again to rows of the batch
            texts_at = again[left[:, 0]]
            starts = np.cumsum(lengths) - lengths
            left = np.column_stack(
                [
                    texts_at,
                    left[:, 1:3],
                    starts[texts_at] + left[:, 3] - (np.cumsum(sizes) - sizes)[left[:, 0]],
                ]
            ).astype(np.int64)
        return values, lengths, left

    def _tokenize(self, texts: Sequence[str]) -> tuple[Any, Any, Any]:
        import numpy as np

        values, lengths, holes = self._module.tokenize(self._vocab, self._table(), texts)
        return (
            np.frombuffer(values, np.int64),
            np.frombuffer(lengths, np.int64),
            np.frombuffer(holes, np.int64).reshape(-1, 4),
        )

    def lines_of(
        self, field: str, tokens: Sequence[str] = (), beyond_ascii: bool = True
    ) -> LineIds | None:
        """JSON lines parsed and tokenized at once, for one text field and one set of added
        tokens (encoded once for every batch): a function of a block's bytes and its lines'
        bounds (`LineIds`) that tokenizes, in one pass without the GIL, the documents that
        are certain and covered (`_json_line.h`: valid JSON objects whose text field is a
        non-blank string of plain text and characters the table holds) and gives their ids
        concatenated, each one's count, which lines they are, and which lines are left to
        the caller (any other line but a blank one, texts that may hold one of tokens' texts,
        ignoring ASCII case, and with beyond_ascii False, every text beyond ASCII), all int64
        numpy. None for a
        field no line can name as UTF-8 (a surrogate from undecodable arguments): Python's
        path reads those."""
        import numpy as np

        try:
            name = field.encode()
            added = tuple(token.encode() for token in tokens if token)
        except UnicodeEncodeError:
            return None

        def ids(data: bytes, ends: Any) -> tuple[Any, Any, Any, Any]:
            table = self._table() if beyond_ascii else None  # the latest, call by call
            values, lengths, taken, left = self._module.lines(
                self._vocab, table, data, ends, name, added
            )
            return (
                np.frombuffer(values, np.int64),
                np.frombuffer(lengths, np.int64),
                np.frombuffer(taken, np.int64),
                np.frombuffer(left, np.int64),
            )

        return ids


def flat_ids(per_text: Sequence[Any]) -> tuple[Any, Any]:
    """Id lists as (their concatenation, their lengths), int64 numpy."""
    import numpy as np

    lengths = np.fromiter(map(len, per_text), np.int64, len(per_text))
    if not per_text:
        return np.zeros(0, np.int64), lengths
    values = np.concatenate([np.asarray(ids, np.int64) for ids in per_text])
    return values.astype(np.int64, copy=False), lengths


def splice_ids(values: Any, lengths: Any, at: Sequence[int], replaced: Sequence[Any]) -> Any:
    """Concatenated per-text ids (values, lengths) with texts `at` (ascending) given the ids
    `replaced`: (values, lengths), int64 numpy; only the replaced texts are touched."""
    import numpy as np

    starts = (np.cumsum(lengths) - lengths).tolist()
    old = lengths.tolist()
    pieces, kept = [], 0
    for i, ids in zip(at, replaced, strict=True):
        pieces += [values[kept : starts[i]], np.asarray(ids, np.int64)]
        kept = starts[i] + old[i]
    pieces.append(values[kept:])
    lengths = lengths.copy()
    lengths[list(at)] = [len(ids) for ids in replaced]
    return np.concatenate(pieces).astype(np.int64, copy=False), lengths


def per_text_ids(values: Any, lengths: Any) -> list[Any]:
    """The inverse of `flat_ids`: each text's ids, as views of the concatenation."""
    import numpy as np

    return np.split(values, np.cumsum(lengths)[:-1]) if len(lengths) else []
