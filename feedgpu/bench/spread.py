"""How sure a measured number is: its spread over rounds, and whether two numbers differ.

On a shared machine one long measurement hides drift; several short rounds show it. A number
is given with its 10th-90th percentile over its rounds, and two numbers whose spreads overlap
are not called different.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ROUNDS = 5  # rounds per measured phase: the fewest that give a 10th-90th percentile


@dataclass(frozen=True)
class Spread:
    """The 10th and 90th percentiles of a number over its rounds.

    Attributes:
        low: 10th percentile.
        high: 90th percentile.
        rounds: how many rounds (1: no spread known, low == high).
    """

    low: float
    high: float
    rounds: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        """The spread of per-round values (percentiles interpolated between rounds)."""
        if not values:
            return cls(0.0, 0.0, 0)
        if len(values) == 1:
            return cls(values[0], values[0], 1)
        deciles = statistics.quantiles(values, n=10, method="inclusive")
        return cls(deciles[0], deciles[-1], len(values))

    def overlaps(self, other: Spread) -> bool:
        """Whether the two ranges share any value: then no difference is shown."""
        return self.low <= other.high and other.low <= self.high

    def relative(self, value: float) -> float:
        """The spread's width as a share of value (0 when value is 0)."""
        return (self.high - self.low) / value if value else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"p10": round(self.low, 4), "p90": round(self.high, 4), "rounds": self.rounds}
