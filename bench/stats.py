"""Percentiles and number formatting shared by the figures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Spread:
    """p50 / p99 / max of a sample (same unit as the sample)."""

    p50: float
    p99: float
    max: float
    n: int

    def ms(self, digits: int = 1) -> str:
        if not self.n:
            return "no samples"
        return (
            f"p50 {self.p50:.{digits}f} / p99 {self.p99:.{digits}f} / max {self.max:.{digits}f} ms"
        )


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted sample."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return float(sorted_values[rank - 1])


def spread(values: Sequence[float]) -> Spread:
    ordered = sorted(values)
    if not ordered:
        return Spread(math.nan, math.nan, math.nan, 0)
    return Spread(
        percentile(ordered, 50), percentile(ordered, 99), float(ordered[-1]), len(ordered)
    )


def si(value: float) -> str:
    """1234567 -> '1.23M', 45678 -> '45.7k'."""
    for factor, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"
