"""Which records of a split each host's input pipeline reads, so that hosts get equal shares.

Synchronous multi-worker training needs every worker to run the same number of steps an
epoch: a worker whose share runs out first gets an empty batch and the step fails. Shard files
are rarely a multiple of the workers (five shards over two hosts gave 371 and 248 examples), so
shares are cut by records, not files: host i reads the records [i*N/k, (i+1)*N/k) of the split
in shard order, as pieces of files (a file, the records to skip, the records to read). Shares
then differ by at most one example, and every record is read by exactly one host.

Records holding blocks of documents (text format 3) cannot be cut by examples without reading
them, so those shards go to hosts whole, each to the host holding fewest examples so far; the
epoch is then cut to the smallest share's batches (`epochs.epoch_batches`) and a warning says
what that leaves out. TensorFlow-free: the arithmetic alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from feedgpu.errors import DatasetError
from feedgpu.format.manifest import ShardInfo


@dataclass(frozen=True)
class Piece:
    """Part of one shard file a host reads: `take` records after the first `skip` (-1: to
    the file's end), holding `examples` examples."""

    file: str
    skip: int
    take: int
    examples: int


def host_shares(shards: Sequence[ShardInfo], hosts: int) -> list[tuple[Piece, ...]]:
    """Each host's pieces of the split, in the split's order; one host reads everything.

    Raises:
        DatasetError: records hold blocks of documents and there are fewer shard files than
            hosts (a file is the smallest share then).
    """
    whole = [Piece(s.file, 0, -1, s.num_examples) for s in shards]
    if hosts <= 1:
        return [tuple(whole)]
    if all(s.num_records == s.num_examples for s in shards):
        return [_record_range(shards, hosts, i) for i in range(hosts)]
    if len(shards) < hosts:
        raise DatasetError(
            f"{len(shards)} shard files of blocks of documents cannot feed {hosts} input "
            f"pipelines; re-convert with --num-shards {hosts} (or a multiple of it)"
        )
    held = [0] * hosts
    owner = [-1] * len(shards)  # an empty shard is nobody's: it would make a host's only share
    for i in sorted(range(len(shards)), key=lambda i: (-shards[i].num_examples, i)):
        if not shards[i].num_examples:
            continue
        host = min(range(hosts), key=lambda h: (held[h], h))
        owner[i] = host
        held[host] += shards[i].num_examples
    return [tuple(p for p, o in zip(whole, owner, strict=True) if o == h) for h in range(hosts)]


def _record_range(shards: Sequence[ShardInfo], hosts: int, host: int) -> tuple[Piece, ...]:
    total = sum(s.num_examples for s in shards)
    begin, end = host * total // hosts, (host + 1) * total // hosts
    pieces = []
    at = 0  # the first record of the current shard, counted over the split
    for s in shards:
        first, last = max(begin, at), min(end, at + s.num_examples)
        if first < last:
            whole = first == at and last == at + s.num_examples
            pieces.append(Piece(s.file, first - at, -1 if whole else last - first, last - first))
        at += s.num_examples
    return tuple(pieces)
