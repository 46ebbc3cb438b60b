"""A chunk's documents in batches of columns, for the tokenizer threads.

An unlabelled JSONL file's lines (`raw_lines.RawLines`) join a batch as read, and the tokenizer
thread that takes the batch parses them; other documents join one by one, read and parsed here,
each given its split and label index, or skipped with a reason. A batch is one kind or the
other, and its cuts depend on the lines only, never on thread counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from feedgpu.convert.plan import Skip
from feedgpu.converters.listing import check_strict, hash_split
from feedgpu.converters.text.names import Names
from feedgpu.converters.text.plain_wordpiece import LineIds
from feedgpu.converters.text.raw_lines import RawLines
from feedgpu.converters.text.records import Tokenized
from feedgpu.converters.text.sources import (
    Document,
    ReadOptions,
    iter_blocks,
    line_document,
    parse_lines,
)

if TYPE_CHECKING:
    from feedgpu.converters.text.options import TextSource

# What a tokenizer thread takes at once: BATCH_DOCS documents (or lines) or BATCH_CHARS of
# text (or bytes of lines), whichever fills first. Each batch has a fixed cost beyond its
# documents (graph calls, tensors, GIL handoffs), which small batches of short documents pay
# too often; counted by characters too, a batch of long documents stays a small part of the
# corpus, so every thread has work. Larger batches were faster still on short text but held
# more memory while the allocator keeps their tensors (benchmarks/RESULTS.md, "Decisions").
BATCH_DOCS = 8192
BATCH_CHARS = 1 << 20


@dataclass
class Batch:
    """Documents tokenized together, as columns, with each one's split and label index; or
    lines to parse first (`parse`), each run with its split (None: each document's by hash)."""

    doc_ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)
    labels: list[int | None] = field(default_factory=list)
    raw: list[tuple[RawLines, int, int, str | None]] = field(default_factory=list)
    lines: int = 0  # raw lines
    chars: int = 0  # of its texts, or bytes of its lines: what filled it, not kept after
    # Parsed and tokenized at once (`LineIds`): every document's ids concatenated and counts
    # (int64 numpy), and which documents' texts are in `texts` to tokenize, their counts 0
    # until then (`ids`). None: every text is in `texts`.
    step_ids: tuple[Any, Any, list[int]] | None = None
    # Documents named by their line ("file:line" of a JSONL file) whose names are not made
    # yet, in runs of (prefix, line numbers: int64 numpy), before any of doc_ids (`names`).
    runs: list[tuple[str, Any]] = field(default_factory=list)
    in_runs: int = 0
    replaced: int = 0  # its documents' bytes replaced by U+FFFD (`Document.replaced`)

    def __len__(self) -> int:
        return len(self.doc_ids) + self.in_runs

    def full(self) -> bool:
        return len(self) + self.lines >= BATCH_DOCS or self.chars >= BATCH_CHARS

    def names(self) -> Names:
        """Every document's name, in order."""
        parts = [Names.numbered(prefix, lines) for prefix, lines in self.runs]
        if self.doc_ids or not parts:
            parts.append(Names.of(self.doc_ids))
        return Names.join(parts)

    def tokenized(self, tokenize: Callable[[list[str]], tuple[Any, Any]]) -> Tokenized:
        """The batch as tokenized (`ids`)."""
        import numpy as np

        ids, lengths = self.ids(tokenize)
        labels = None
        if self.labels and self.labels[0] is not None:  # a labelled dataset: every one has one
            labels = np.array(self.labels, np.int64)
        return Tokenized(ids, lengths, self.names(), self.splits, labels)

    def add(self, doc: Document, split: str, label: int | None) -> None:
        """A document read, its characters filling the batch."""
        self._append(doc, split, label)
        self.chars += len(doc.text)

    def _append(self, doc: Document, split: str, label: int | None) -> None:
        """A document into the columns. (A line `parse` reads on a tokenizer thread filled the
        batch by its bytes already; the reading thread reads `chars` meanwhile, and the
        batches' cuts must never depend on timing.)"""
        self.doc_ids.append(doc.doc_id)
        self.texts.append(doc.text)
        self.splits.append(split)
        self.labels.append(label)
        self.replaced += doc.replaced

    def add_lines(self, raw: RawLines, start: int, end: int, split: str | None) -> None:
        """Lines start..end of raw, to parse on a tokenizer thread."""
        self.raw.append((raw, start, end, split))
        self.lines += end - start
        self.chars += int(raw.ends[end] - raw.ends[start])

    def parse(
        self,
        read: ReadOptions,
        fractions: dict[str, float],
        strict: bool,
        line_ids: LineIds | None = None,
    ) -> list[Skip]:
        """The raw lines' documents into the columns (unlabelled); their skips. With
        line_ids, the lines it takes are tokenized as they are parsed (`step_ids`).

        Raises:
            InputError: a skip under --strict.
        """
        skips: list[Skip] = []
        parts: list[tuple[Any, Any, list[Skip]]] = []
        todo: list[int] = []
        for raw, start, end, split in self.raw:
            if line_ids is not None:
                ids = line_ids(raw.data, raw.ends[start : end + 1])
                parts.append(self._add_tokenized(raw, start, ids, split, fractions, read, todo))
                skips += parts[-1][2]
                check_strict(skips, strict)
                continue
            for found in parse_lines(raw, start, end, read):
                if isinstance(found, Skip):
                    check_strict([found], strict)
                    skips.append(found)
                else:
                    self._append(found, split or hash_split(found.doc_id, fractions), None)
        if len(parts) == 1:
            self.step_ids = (parts[0][0], parts[0][1], todo)
        elif parts:
            import numpy as np

            values = np.concatenate([p[0] for p in parts])
            self.step_ids = (values, np.concatenate([p[1] for p in parts]), todo)
        self.raw, self.lines = [], 0
        return skips

    def ids(self, tokenize: Callable[[list[str]], tuple[Any, Any]]) -> tuple[Any, Any]:
        """Every document's ids concatenated, and each one's count (int64 numpy): those
        `parse` tokenized, with tokenize's of the texts left to it."""
        if self.step_ids is None:
            return tokenize(self.texts)
        import numpy as np

        values, lengths, todo = self.step_ids
        if not todo:
            return values, lengths
        more, sizes = tokenize(self.texts)
        if len(todo) == len(lengths):  # every line was left (a corpus of non-plain texts)
            return more, sizes
        # Each text's ids where its count of 0 sits, in one insert: text by text, a batch of
        # mostly such texts took milliseconds.
        starts = (np.cumsum(lengths) - lengths)[todo]
        lengths = lengths.copy()
        lengths[todo] = sizes
        return np.insert(values, np.repeat(starts, sizes), more), lengths

    def _add_tokenized(
        self,
        raw: RawLines,
        start: int,
        found: tuple[Any, Any, Any, Any],
        split: str | None,
        fractions: dict[str, float],
        read: ReadOptions,
        todo: list[int],
    ) -> tuple[Any, Any, list[Skip]]:
        """One run of lines as `line_ids` found them: its documents into the columns in line
        order. The lines it left are parsed here: a document's text joins `texts` (its place
        in `todo`, its count 0 until tokenized). Its ids and counts, and the skips."""
        import numpy as np

        values, lengths, taken, left = found
        lines: Any = taken
        skips: list[Skip] = []
        if len(left):
            skips, kept = _parse_left(raw, start, left.tolist(), read)
            at = np.searchsorted(taken, [line for line, _ in kept]).astype(np.int64)
            lines = np.insert(taken, at, [line for line, _ in kept])
            lengths = np.insert(lengths, at, 0)
            todo += (at + np.arange(len(at)) + len(self)).tolist()
            self.texts += [doc.text for _, doc in kept]
            self.replaced += sum(doc.replaced for _, doc in kept)
        prefix, lines = f"{raw.rel}:", lines + (raw.number + start)
        if split is None:  # each one's split by its name's hash (the names made again later)
            names = Names.numbered(prefix, lines).strings()
            self.splits += [hash_split(name, fractions) for name in names]
        else:
            self.splits += [split] * len(lines)
        self.runs.append((prefix, lines))  # named when needed, in one call (`names`)
        self.in_runs += len(lines)
        self.labels += [None] * len(lines)
        return values, lengths, skips


def _parse_left(
    raw: RawLines, start: int, left: list[int], read: ReadOptions
) -> tuple[list[Skip], list[tuple[int, Document]]]:
    """The lines of raw a `LineIds` left (offsets from start), parsed one by one: their skips,
    and each document with its line (a blank line has neither)."""
    skips: list[Skip] = []
    kept: list[tuple[int, Document]] = []
    for line in left:
        found = line_document(
            raw.line(start + line), f"{raw.rel}:{raw.number + start + line}", True, read
        )
        if isinstance(found, Skip):
            skips.append(found)
        elif found is not None:
            kept.append((line, found))
    return skips, kept


@dataclass(frozen=True)
class Labels:
    """How documents get their split and label: split fractions, label names' indexes."""

    fractions: dict[str, float]
    index: dict[str, int]


def iter_batches(
    sources: list[TextSource],
    read: ReadOptions,
    labels: Labels,
    skips: list[Skip],
    strict: bool,
) -> Iterator[Batch]:
    """Sources' documents in batches (BATCH_DOCS, BATCH_CHARS; the last may be short);
    skips appended, but for lines a batch holds unparsed (`Batch.parse` returns theirs).
    The cuts depend on the input alone, never on threads or timing.

    Raises:
        InputError: a skip under --strict.
    """
    batch = Batch()
    fractions, label_index = labels.fractions, labels.index
    one_split = next(iter(fractions)) if len(fractions) == 1 else None
    for source in sources:
        for found in iter_blocks(source.file, read, source.span):
            split = source.split or one_split
            if isinstance(found, Skip):  # a file refused whole (binary, unreadable)
                if strict and batch.raw:  # lines read before it may hold the first error
                    yield batch
                    batch = Batch()
                check_strict([found], strict)
                skips.append(found)
                continue
            if isinstance(found, RawLines) and not label_index:
                if len(batch):  # a batch is lines or documents, in order
                    yield batch
                    batch = Batch()
                start, size = 0, len(found)
                while start < size:  # cut by the lines alone, whatever blocks they came in
                    # Up to the line that fills the batch's bytes, or its count.
                    budget = int(found.ends[start]) + BATCH_CHARS - batch.chars
                    end = min(
                        size,
                        start + BATCH_DOCS - batch.lines,
                        max(start + 1, int(found.ends.searchsorted(budget))),
                    )
                    batch.add_lines(found, start, end, split)
                    start = end
                    if batch.full():
                        yield batch
                        batch = Batch()
                continue
            if batch.raw:
                yield batch
                batch = Batch()
            docs: Iterable[Document | Skip]
            if isinstance(found, RawLines):  # labelled: parsed here, document by document
                docs = parse_lines(found, 0, len(found), read)
            else:
                docs = (found,)
            for doc in docs:
                if isinstance(doc, Skip):
                    check_strict([doc], strict)
                    skips.append(doc)
                    continue
                label_name = doc.label if doc.label is not None else source.label
                if label_index and label_name is None:  # a labelled dataset: all or none
                    skip = Skip(doc.doc_id, "no label", "labelled dataset, document has none")
                    check_strict([skip], strict)
                    skips.append(skip)
                    continue
                label = label_index[label_name] if label_name is not None else None
                batch.add(doc, split or hash_split(doc.doc_id, fractions), label)
                if batch.full():
                    yield batch
                    batch = Batch()
    if len(batch) or batch.raw:
        yield batch
