"""Text batching's arithmetic, without TensorFlow: records a block holds, batches a bucketing
window sorts within, and bucket boundaries chosen from the manifest's exact length counts (so
`PipelineSpec` decides them without importing the batching code)."""

from __future__ import annotations

from collections.abc import Sequence

# Records read, parsed and cached together: one op per block instead of one per record (a
# tf.data stage costs more per element than parsing a text record: benchmarks/RESULTS.md,
# "Decisions").
BLOCK = 256
# Batches per bucketing window: more sorts closer to the bucket bounds, and holds more in memory.
BUCKET_WINDOW = 16


def choose_boundaries(
    length_counts: Sequence[Sequence[int]],
    max_length: int,
    max_buckets: int = 16,
    multiple: int = 8,
    target_waste: float = 0.10,
) -> list[int]:
    """The fewest bucket upper bounds whose padding is at most target_waste of the batch.

    Each distinct shape costs an XLA compilation, so buckets are added only while they pay:
    for each bucket count, dynamic programming over the distinct (rounded) lengths finds the
    bounds with the least padding ((bound - length) summed over examples); the first count
    reaching target_waste wins, else the best with max_buckets. Bounds are multiples of
    `multiple`, at most max_length.
    """
    counts: dict[int, int] = {}
    for length, n in length_counts:
        rounded = min(max_length, -(-int(length) // multiple) * multiple)
        counts[rounded] = counts.get(rounded, 0) + int(n)
    values = sorted(counts)
    if not values:
        return [max_length]
    m, k = len(values), min(max_buckets, len(values))
    prefix_n, prefix_sum = [0], [0]
    for v in values:
        prefix_n.append(prefix_n[-1] + counts[v])
        prefix_sum.append(prefix_sum[-1] + counts[v] * v)

    def cost(i: int, j: int) -> int:  # padding when values[i..j] share bound values[j]
        return values[j] * (prefix_n[j + 1] - prefix_n[i]) - (prefix_sum[j + 1] - prefix_sum[i])

    inf = float("inf")
    best = [[inf] * m for _ in range(k + 1)]
    cut = [[0] * m for _ in range(k + 1)]
    best[1] = [cost(0, j) for j in range(m)]
    for b in range(2, k + 1):
        for j in range(m):
            for i in range(b - 1, j + 1):
                c = best[b - 1][i - 1] + cost(i, j)
                if c < best[b][j]:
                    best[b][j], cut[b][j] = c, i
    bounds: list[int] = []
    for b in range(1, k + 1):
        bounds, j, left = [], m - 1, b
        while left >= 1 and j >= 0:
            bounds.append(values[j])
            j = cut[left][j] - 1 if left > 1 else -1
            left -= 1
        bounds.sort()
        if padding_waste(length_counts, bounds) <= target_waste:
            break
    return bounds


def padding_waste(length_counts: Sequence[Sequence[int]], bounds: Sequence[int]) -> float:
    """Share of padded positions when each example is padded to the first bound >= its length."""
    padded = real = 0
    for length, n in length_counts:
        bound = next((b for b in bounds if b >= length), bounds[-1])
        kept = min(int(length), bound)
        real += kept * int(n)
        padded += bound * int(n)
    return 1 - real / padded if padded else 0.0
