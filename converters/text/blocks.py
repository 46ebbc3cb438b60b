"""Which documents of a tokenized batch share a record: blocks of consecutive documents.

A record holding one short document costs a reader more to frame, parse and hand over than the
document's ids are worth; a block of consecutive documents is read, parsed and kept as one
(benchmarks/RESULTS.md, "Issue 28"). Blocks are cut within a batch, whose documents do not
depend on thread counts, so neither do the blocks: never across a split, never across batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# --docs-per-record auto: a corpus whose first documents average at most SHORT_IDS ids (special
# tokens included) is stored in blocks, a record holding the documents that start within one
# window of RECORD_IDS ids, at most RECORD_DOCS of them; longer documents one a record, as
# format 2 stores them. Measured: blocks read short documents (~44 ids) faster from disk, and
# medium (~312) and long ones slower (benchmarks/RESULTS.md, "Issue 28"). On 120 MB corpora
# (RESULTS.md, "the 128-id line at 120 MB"), at ~83 ids blocks read 20-30% faster from disk and
# no slower in the first epoch; at ~129 ids they are a trade (from disk ~10% faster, cached and
# first epoch ~10% slower): the line sits where blocks stop paying. (At 30 MB they seemed to
# lose the first epoch: a fixed start-up cost, in an epoch of 0.4 s.)
SHORT_IDS = 128
SAMPLE_DOCUMENTS = 256
RECORD_IDS = 4096
RECORD_DOCS = 256


def choose_per_record(mean_ids: float | None) -> int | None:
    """--docs-per-record auto for a corpus whose first documents average mean_ids ids (None:
    none read): None (blocks by size) for short documents, else 1."""
    return None if mean_ids is not None and mean_ids <= SHORT_IDS else 1


@dataclass(frozen=True)
class Blocks:
    """A batch's documents in record order, and each record's documents.

    Attributes:
        order: the batch's document indexes in record order (None: the batch's own order).
        sizes: documents per record, in record order (int64 numpy).
    """

    order: Any
    sizes: Any

    @property
    def firsts(self) -> Any:
        """Each record's first document, as an index in record order."""
        import numpy as np

        return np.cumsum(self.sizes) - self.sizes


def cut_blocks(lengths: Any, splits: list[str], per_record: int | None) -> Blocks:
    """The records a batch's documents make: per_record documents each (the last of a split
    fewer), or with per_record None the documents starting within each window of RECORD_IDS
    ids, at most RECORD_DOCS; documents of one split only, in the batch's order.

    lengths: ids per document as stored (int64 numpy); splits: each document's split.
    """
    import numpy as np

    n = len(lengths)
    if per_record == 1:  # a record per document: the layout of format 2
        return Blocks(None, np.ones(n, np.int64))
    order = None
    group = np.zeros(n, np.int64)  # the split each document is in, as a number
    if n and len(set(splits)) > 1:
        number = {name: i for i, name in enumerate(sorted(set(splits)))}
        group = np.fromiter(map(number.__getitem__, splits), np.int64, n)
        order = np.argsort(group, kind="stable")
        group, lengths = group[order], lengths[order]
    index = np.arange(n, dtype=np.int64)
    cut = np.ones(n, bool)  # where a record starts
    if n:
        cut[1:] = group[1:] != group[:-1]
        first_of_split = np.maximum.accumulate(np.where(cut, index, 0))
        place = index - first_of_split  # within its split
        if per_record is not None:
            cut |= place % per_record == 0
        else:
            starts = np.cumsum(lengths) - lengths
            starts -= starts[first_of_split]
            window = starts // RECORD_IDS
            cut[1:] |= window[1:] != window[:-1]
            first_of_run = np.maximum.accumulate(np.where(cut, index, 0))
            cut |= (index - first_of_run) % RECORD_DOCS == 0
    firsts = np.flatnonzero(cut)
    sizes = np.diff(np.append(firsts, n)).astype(np.int64)
    return Blocks(order, sizes)
