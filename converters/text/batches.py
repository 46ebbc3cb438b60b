"""A chunk's documents in batches of columns, for the tokenizer threads.

Runs of usual JSON lines (`sources.DocumentBlock`) join a batch whole; other documents
one by one, each given its split and label index, or skipped with a reason.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING

from feedgpu.convert.plan import Skip
from feedgpu.converters.listing import check_strict, hash_split
from feedgpu.converters.text.sources import Document, DocumentBlock, ReadOptions, iter_blocks

if TYPE_CHECKING:
    from feedgpu.converters.text.options import TextSource

# What a tokenizer thread takes at once: BATCH_DOCS documents or BATCH_CHARS of text,
# whichever fills first. Each batch has a fixed cost beyond its documents (graph calls,
# tensors, GIL handoffs), which small batches of short documents pay too often; counted by
# characters too, a batch of long documents stays a small part of the corpus, so every thread
# has work. Larger batches were faster still on short text but held more memory while the
# allocator keeps their tensors (benchmarks/RESULTS.md, "Issue 16", "batches by size").
BATCH_DOCS = 8192
BATCH_CHARS = 1 << 20


@dataclass
class Batch:
    """Documents tokenized together, as columns, with each one's split and label index."""

    doc_ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    plain: list[bool] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)
    labels: list[int | None] = field(default_factory=list)
    chars: int = 0  # of its texts

    def __len__(self) -> int:
        return len(self.doc_ids)

    def full(self) -> bool:
        return len(self.doc_ids) >= BATCH_DOCS or self.chars >= BATCH_CHARS

    def add(self, doc: Document, split: str, label: int | None) -> None:
        self.doc_ids.append(doc.doc_id)
        self.texts.append(doc.text)
        self.plain.append(doc.plain)
        self.splits.append(split)
        self.labels.append(label)
        self.chars += len(doc.text)

    def add_block(self, block: DocumentBlock, start: int, end: int, split: str) -> None:
        """Documents start..end of a block, all in one split, unlabelled."""
        self.doc_ids += block.doc_ids[start:end]
        self.texts += block.texts[start:end]
        self.plain += block.plain[start:end]
        self.splits += [split] * (end - start)
        self.labels += [None] * (end - start)
        self.chars += block.ends[end] - block.ends[start]


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
    skips appended.

    Raises:
        InputError: a skip under --strict.
    """
    batch = Batch()
    fractions, label_index = labels.fractions, labels.index
    one_split = next(iter(fractions)) if len(fractions) == 1 else None
    for source in sources:
        for found in iter_blocks(source.file, read):
            split = source.split or one_split
            if isinstance(found, DocumentBlock) and split and not label_index:
                start, size = 0, len(found.doc_ids)
                while start < size:  # whole blocks: no document by document
                    # Up to the document that fills the batch's characters, or its count.
                    budget = found.ends[start] + BATCH_CHARS - batch.chars
                    end = min(
                        size,
                        start + BATCH_DOCS - len(batch),
                        bisect.bisect_left(found.ends, budget, start + 1),
                    )
                    batch.add_block(found, start, end, split)
                    start = end
                    if batch.full():
                        yield batch
                        batch = Batch()
                continue
            docs: Iterable[Document | Skip]
            if isinstance(found, DocumentBlock):  # per document after all: splits or labels
                docs = map(Document, found.doc_ids, found.texts, repeat(None), found.plain)
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
    if len(batch):
        yield batch
