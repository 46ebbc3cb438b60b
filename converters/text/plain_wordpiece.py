"""WordPiece ids of texts by feedgpu's own compiled step (`_wordpiece.c`), when built.

Most of a real corpus is plain text (printable ASCII, tab, CR, LF). For it BERT's normaliser
is at most ASCII lowercasing and its pre-tokenizer a split at whitespace and punctuation, so
the ids come straight from the texts' bytes, without the GIL, at several times
tensorflow-text's speed: that op also makes every token's string and offsets, which nobody
reads, and needs the texts copied into a tensor first (benchmarks/RESULTS.md, "Issue 29, fifth
session"). Characters beyond ASCII are looked up in a table learned from HF as they turn up
(`char_table`); a chunk between ASCII whitespace holding one the table lacks (or cannot hold)
is left to tensorflow-text and HF, as before.

Where the step is not built, or FEEDGPU_NO_NATIVE=1 is set, tensorflow-text takes every text
(`native`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from feedgpu.converters.text.char_table import CharTable, Entry
from feedgpu.converters.text.examples import per_text_ids, splice_ids
from feedgpu.format.records import packed_varints

# A run of JSON lines parsed and tokenized at once (`PlainWordPiece.lines_of`, its field and
# triggers given), from bytes and their lines' bounds (line i is data[ends[i]:ends[i + 1]],
# `raw_lines.RawLines`), and optionally the unknown token's id: the ids of the documents it
# took (int64 numpy, or with that id, `Varints`), their counts, which lines they are, and the
# lines it left to the caller (int64 numpy).
LineIds = Callable[..., tuple[Any, Any, Any, Any]]


@dataclass(frozen=True)
class Varints:
    """Documents' ids as records store them, each one's varints concatenated (data), with
    their bytes and unknown ids each (sizes, unknown: int64 numpy): the JSON-lines step's,
    where the records are framed from them (`framed`). Made straight from each document's
    ids while they are in cache, a batch's ids are never int64 in memory: no 8 bytes an id,
    no copy of them out of the step, no varint pass over them (a short conversion's CPU
    0.579-0.590 -> 0.562-0.581 s; benchmarks/RESULTS.md, "Issue 29, eleventh session")."""

    data: bytes
    sizes: Any
    unknown: Any

    def ids(self) -> Any:
        """The ids, int64 numpy (for a batch that takes another path after all)."""
        import numpy as np

        return packed_varints(self.data).astype(np.int64)

    @staticmethod
    def join(parts: Sequence[Varints]) -> Varints:
        import numpy as np

        if len(parts) == 1:
            return parts[0]
        return Varints(
            b"".join(p.data for p in parts),
            np.concatenate([p.sizes for p in parts]),
            np.concatenate([p.unknown for p in parts]),
        )


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
        tokens (encoded once for every batch): a function of a block's bytes, its lines'
        bounds and optionally the unknown token's id (`LineIds`) that tokenizes, in one pass
        without the GIL, the documents that are certain and covered (`_json_line.h`: valid
        JSON objects whose text field is a non-blank string of plain text and characters the
        table holds) and gives their ids concatenated (or with that id, as `Varints`), each
        one's count, which lines they are, and which lines are left to the caller (any other
        line but a blank one, texts that may hold one of tokens' texts, ignoring ASCII case,
        and with beyond_ascii False, every text beyond ASCII), all int64 numpy. None for a
        field no line can name as UTF-8 (a surrogate from undecodable arguments): Python's
        path reads those."""
        import numpy as np

        try:
            name = field.encode()
            added = tuple(token.encode() for token in tokens if token)
        except UnicodeEncodeError:
            return None

        def ids(data: bytes, ends: Any, unk: int | None = None) -> tuple[Any, Any, Any, Any]:
            table = self._table() if beyond_ascii else None  # the latest, call by call
            found = self._module.lines(self._vocab, table, data, ends, name, added, unk)
            lengths, taken, left, *more = (np.frombuffer(part, np.int64) for part in found[1:])
            if unk is None:
                return np.frombuffer(found[0], np.int64), lengths, taken, left
            return Varints(found[0], *more), lengths, taken, left

        return ids
