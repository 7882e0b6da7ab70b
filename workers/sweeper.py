"""The sweeper: reclaims what is no longer needed, every ``interval_ms``.

- The timer range the deliverer has already moved: moves delete their span and advance a
  watermark; compacting ``[start, watermark)`` drops those tombstones from disk, so a
  store that has delivered millions of timers scans its due range as fast as a fresh one.
- Retention (workers/ops/retention.py), through the writer: delivered messages, dead letters,
  cancel tombstones and the bookkeeping of empty lanes.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from storage import keys
from storage.errors import StorageError, WriterStopped
from storage.store import CF, RocksStore
from storage.txn import Txn
from workers.clock import Clock
from workers.ops import retention
from workers.thread import Periodic
from workers.writer import Writer

T = TypeVar("T")

log = logging.getLogger("rocktimer.sweeper")

MAX_OPS_PER_LANE = 100  # per sweep: a backlog of 100k per lane; the next sweep goes on


class Sweeper(Periodic):
    name = "rocktimer-sweeper"
    expected = (StorageError, WriterStopped)

    def __init__(
        self,
        store: RocksStore,
        clock: Clock,
        interval_ms: int,
        writer: Writer | None = None,
        retention_ms: int | None = None,
        dlq_retention_ms: int | None = None,
    ) -> None:
        super().__init__(clock, interval_ms)
        self.store = store
        self.writer = writer
        self.retention_ms = retention_ms
        self.dlq_retention_ms = dlq_retention_ms if dlq_retention_ms is not None else retention_ms
        self.compactions = 0
        self.expired = 0  # log entries past retention dealt with
        self.lost = 0  # messages groups had not consumed within retention
        self._lost_groups: set[tuple[bytes, str]] = set()  # logged once per (lane, group)
        self._reclaimed: bytes = b""

    def retain(self) -> int:
        """Apply retention to every lane, held entry and tombstone; returns how many log
        entries past retention it dealt with."""
        if self.writer is None or self.retention_ms is None or self.dlq_retention_ms is None:
            return 0
        now = self.clock.now_ms()
        cutoff, dead_cutoff = now - self.retention_ms, now - self.dlq_retention_ms
        total = 0
        for lane in retention.lanes(self.store):
            # Held entries first: a lane they leave empty loses its meta keys in this sweep.
            self._repeat(partial(retention.sweep_held, lane=lane))
            for _ in range(MAX_OPS_PER_LANE):
                if self.stopping:
                    return total
                swept = self._call(
                    partial(
                        retention.sweep_lane,
                        lane=lane,
                        cutoff_ms=cutoff,
                        dead_cutoff_ms=dead_cutoff,
                    )
                )
                total += swept.passed
                self._count_lost(lane, swept.lost)
                if swept.passed < retention.RETENTION_BATCH:
                    break
        self._repeat(partial(retention.sweep_tombstones, cutoff_ms=cutoff))
        self.expired += total
        return total

    def _call(self, op: Callable[[Txn], T]) -> T:
        assert self.writer is not None
        return self.writer.call(op, durable=False)

    def _repeat(self, op: Callable[[Txn], int]) -> None:
        """Run an op that does up to a batch at a time until it does less."""
        for _ in range(MAX_OPS_PER_LANE):
            if self.stopping or self._call(op) < retention.RETENTION_BATCH:
                return

    def _count_lost(self, lane: bytes, lost: Counter[str]) -> None:
        for group, count in lost.items():
            self.lost += count
            if (lane, group) not in self._lost_groups:
                self._lost_groups.add((lane, group))
                log.warning(
                    "group %r lost %d message(s) of %r it had not consumed within retention "
                    "(logged once per group; rocktimer_retention_lost_total counts them all)",
                    group,
                    count,
                    lane[:-1].decode(),
                )

    def sweep(self) -> bool:
        """Compact the moved timer range if it grew since last time; True if it did."""
        watermark = self.store.get(CF.META, keys.WATERMARK_KEY)
        if watermark is None or watermark <= self._reclaimed:
            return False
        self.store.compact(CF.TIMERS, None, watermark)
        self._reclaimed = watermark
        self.compactions += 1
        return True

    def tick(self) -> None:
        self.sweep()
        self.retain()
