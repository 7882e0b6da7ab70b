"""A histogram cheap enough for the hot paths: fixed bounds, a lock, counts in a list.

Workers observe into it (the writer's batch sizes, the syncer's fsync times, the lateness
of every delivery); app/metrics.py renders it for Prometheus. Bounds and values share one
unit, whatever the caller measures in.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Iterable, Sequence


class Histogram:
    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self._lock = threading.Lock()
        self._counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound
        self._sum: float = 0

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.bounds, value)
        with self._lock:
            self._counts[i] += 1
            self._sum += value

    def observe_many(self, values: Iterable[float]) -> None:
        """Many values at once (a move of thousands mostly shares a few: counted in C)."""
        local = [0] * len(self._counts)
        total: float = 0
        for v, n in Counter(values).items():
            local[bisect.bisect_left(self.bounds, v)] += n
            total += v * n
        with self._lock:
            for i, n in enumerate(local):
                self._counts[i] += n
            self._sum += total

    def snapshot(self) -> tuple[list[int], float]:
        """Per-bucket counts (not cumulative, the last above every bound) and the sum."""
        with self._lock:
            return list(self._counts), self._sum

    @property
    def count(self) -> int:
        return sum(self.snapshot()[0])

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the q-quantile: None when nothing was
        observed; the last bound (a floor) when it lies above every bound."""
        counts, _ = self.snapshot()
        total = sum(counts)
        if not total:
            return None
        rank, seen = q * total, 0
        for bound, n in zip(self.bounds, counts, strict=False):  # not the one above all
            seen += n
            if seen >= rank:
                return float(bound)
        return float(self.bounds[-1])
