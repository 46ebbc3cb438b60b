"""A tokenized batch's records and the shards they go to, then written onto the shards' pieces.

Each record (a document's example, or a block of consecutive documents: `blocks`) goes to the
shard its (first) document's seeded hash picks: an index into `names`, each split's shards in
order ("train-00003" is a piece key). Where each document makes one example, the records are
built in bulk (`ExampleBuilder`, or `framed` where every document is named by its line);
windows and packing make theirs document by document (`pieces.Windows`).
"""

from __future__ import annotations

import itertools
from typing import Any

from feedgpu.converters.text.batches import Batch
from feedgpu.converters.text.examples import BuiltExamples, ExampleBuilder, per_text_ids, route
from feedgpu.converters.text.framed import FramedBatch, framed_batch, varints_unk, write_framed
from feedgpu.converters.text.pieces import ChunkWriter, Windows, piece_key
from feedgpu.converters.text.plain_wordpiece import Varints


class BatchRecords:
    """A batch's records, routed (`encode`, on a tokenizer thread), and written (`emit`).

    Args:
        examples: the builder of one example a document, or None (windows or packing).
        windows: what makes the examples of windows and packing.
        key: the route's seeded hash key (`examples.route_key`).
        shard_counts: each split's shard count, in the splits' order.
    """

    def __init__(
        self,
        examples: ExampleBuilder | None,
        windows: Windows,
        key: list[int],
        shard_counts: dict[str, int],
    ) -> None:
        self.examples, self.windows, self.key = examples, windows, key
        self.names = [piece_key(s, i) for s, n in shard_counts.items() for i in range(n)]
        starts = itertools.accumulate(shard_counts.values(), initial=0)
        self.split_shards = {
            s: (a, n) for (s, n), a in zip(shard_counts.items(), starts, strict=False)
        }

    def shards(self, doc_ids: Any, splits: list[str]) -> Any:
        """Each document's shard, as an index into `names` (int64 numpy)."""
        import numpy as np

        hashed = route(doc_ids, self.key)
        if len(self.split_shards) == 1:
            first, count = next(iter(self.split_shards.values()))
            return (hashed % np.uint64(count)).astype(np.int64) + first
        placed = np.array([self.split_shards[split] for split in splits], np.int64)
        return (hashed % placed[:, 1].astype(np.uint64)).astype(np.int64) + placed[:, 0]

    def varints_unk(self, batch: Batch) -> int | None:
        """The unknown token's id where a batch of lines is best tokenized into `Varints`
        (its records will be framed from them: `framed.varints_unk`); else None."""
        return varints_unk(self.examples, batch)

    def encode(self, batch: Batch, values: Any, lengths: Any) -> Any:
        """A batch's records from its ids (values concatenated: int64 numpy or `Varints`;
        lengths each: int64 numpy):
        framed by shard (`FramedBatch`), or built with each record's shard; or its ids with
        each document's shard (windows or packing)."""
        framed = None
        if self.examples is not None:
            framed = framed_batch(
                self.examples, batch, values, lengths, self.key, self.split_shards
            )
        if framed is not None:
            return framed
        if isinstance(values, Varints):  # asked for (`varints_unk`), yet not framed after all
            values = values.ids()
        if self.examples is None:
            return self.shards(batch.names(), batch.splits), (values, lengths)
        names = batch.names()  # for routing and for the examples
        labels = None
        if self.examples.labelled:  # every document has one (iter_batches); the builder checks
            labels = [label for label in batch.labels if label is not None]
        built = self.examples(values, lengths, names, labels, batch.splits)
        order = built.blocks.order
        if order is None and len(built.blocks.sizes) == len(batch):  # a record per document
            return self.shards(names, batch.splits), built
        # A block goes where its first document's id sends it.
        firsts = built.blocks.firsts if order is None else order[built.blocks.firsts]
        firsts = firsts.tolist()
        splits = [batch.splits[i] for i in firsts]
        return self.shards([names[i] for i in firsts], splits), built

    def emit(self, writer: ChunkWriter, batch: Batch, encoded: Any) -> int:
        """A batch's records (`encode`'s) onto their shards' pieces, with its statistics; its
        tokens."""
        import numpy as np

        if isinstance(encoded, FramedBatch):
            return write_framed(writer, self.names, encoded)
        shards, built = encoded
        if not isinstance(built, BuiltExamples):  # windows or packing: per document
            per_doc = per_text_ids(*built)
            keys = [self.names[i] for i in shards.tolist()]
            rows = zip(batch.names(), keys, batch.labels, per_doc, strict=True)
            return sum(self.windows.emit(writer, *row) for row in rows)
        if built.records:
            writer.check_first(built.records[0])
        full = built.full_lengths
        doc_shards = np.repeat(shards, built.blocks.sizes)  # each document's, in record order
        writer.count_batch(self.names, doc_shards, full, built.unknown, built.stored)
        writer.write_routed(self.names, shards, built.records)
        return int(full.sum())
