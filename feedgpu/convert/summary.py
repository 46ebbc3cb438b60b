"""Per-statistic summaries (count, sum, min, max, a quarter-octave histogram) that merge exactly
across shards and workers: image sizes and document lengths in the manifest."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any


class Summary:
    """Count, sum, min, max and a quarter-octave histogram for each named statistic.

    Kept as sums and bucket counts so that shard summaries merge exactly whatever the
    number of workers.
    """

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self.data: dict[str, dict[str, Any]] = json.loads(json.dumps(data or {}))
        for s in self.data.values():  # to_json's [edge, count] pairs back to a dict
            if isinstance(s.get("hist"), list):
                s["hist"] = {str(edge): n for edge, n in s["hist"]}

    @staticmethod
    def bucket(value: float) -> int:
        """Upper edge of value's histogram bucket: quarter-octave steps, rounded up."""
        if value <= 1:
            return 1 if value > 0 else 0
        return math.ceil(2 ** (math.ceil(math.log2(value) * 4) / 4))

    def add_counts(self, key: str, counts: Mapping[Any, int]) -> None:
        """Record `n` examples of each value at once.

        In value order, as one at a time would (a float sum adds up the same), each value's
        bucket looked up once per process (`_edge`): a text shard's exact length counts
        (~1,500 values for real-like documents) took 2.1 ms each, now 0.6, at a
        conversion's end (benchmarks/RESULTS.md, "Decisions")."""
        s: dict[str, Any] | None = None
        for value, n in sorted(counts.items()):
            if n <= 0:
                continue
            if s is None:
                s = self.data.setdefault(key, {"count": 0, "sum": 0, "min": value, "max": value})
                hist = s.setdefault("hist", {})
                low, high, total, count = s["min"], s["max"], s["sum"], s["count"]
            count += n
            total += value * n
            low, high = min(low, value), max(high, value)
            edge = _edge(value)
            hist[edge] = hist.get(edge, 0) + n
        if s is not None:
            s["count"], s["sum"], s["min"], s["max"] = count, total, low, high

    def merge(self, other: Summary) -> None:
        """Fold another summary into this one."""
        for key, o in other.data.items():
            s = self.data.get(key)
            if s is None:
                self.data[key] = json.loads(json.dumps(o))
                continue
            s["count"] += o["count"]
            s["sum"] += o["sum"]
            s["min"], s["max"] = min(s["min"], o["min"]), max(s["max"], o["max"])
            for edge, n in o.get("hist", {}).items():
                s["hist"][edge] = s["hist"].get(edge, 0) + n

    def to_json(self) -> dict[str, Any]:
        """Summaries with means; the histogram as [upper edge, count] pairs in edge order."""
        out = {}
        for key, s in sorted(self.data.items()):
            hist = s.get("hist", {})
            pairs = sorted(
                [int(edge), n] for edge, n in (hist.items() if isinstance(hist, dict) else hist)
            )
            mean = s["sum"] / s["count"] if s["count"] else 0
            out[key] = {**s, "mean": round(mean, 4), "hist": pairs}
        return out


@functools.lru_cache(maxsize=1 << 16)
def _edge(value: float) -> str:
    """Summary.bucket(value) as a histogram key (values equal as numbers share one: so do
    their buckets)."""
    return str(Summary.bucket(value))
