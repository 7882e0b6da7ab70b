"""The sweeper: reclaims what is no longer needed, every ``interval_ms``.

- The timer range the deliverer has already moved: moves delete their span and advance a
  watermark; compacting ``[start, watermark)`` drops those tombstones from disk, so a
  store that has delivered millions of timers scans its due range as fast as a fresh one.
- Delivered messages past the retention (workers/retention.py), through the writer.
"""

from __future__ import annotations

import logging
from functools import partial

from storage import keys
from storage.errors import StorageError
from storage.store import CF, RocksStore
from workers import retention
from workers.clock import Clock
from workers.thread import WorkerThread
from workers.writer import Writer, WriterStopped

log = logging.getLogger("rocktimer.sweeper")

MAX_OPS_PER_LANE = 100  # per sweep: a backlog of 100k per lane; the next sweep goes on


class Sweeper(WorkerThread):
    name = "rocktimer-sweeper"

    def __init__(
        self,
        store: RocksStore,
        clock: Clock,
        interval_ms: int,
        writer: Writer | None = None,
        retention_ms: int | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        self.clock = clock
        self.interval_ms = interval_ms
        self.writer = writer
        self.retention_ms = retention_ms
        self.compactions = 0
        self.expired = 0  # log entries reclaimed past retention
        self._reclaimed: bytes = b""

    def retain(self) -> int:
        """Reclaim every lane's entries past the retention; returns how many went."""
        if self.writer is None or self.retention_ms is None:
            return 0
        cutoff = self.clock.now_ms() - self.retention_ms
        total = 0
        for lane in retention.lanes(self.store):
            for _ in range(MAX_OPS_PER_LANE):
                if self.stopping:
                    return total
                gone = self.writer.call(
                    partial(retention.sweep_lane, lane=lane, cutoff_ms=cutoff), durable=False
                )
                total += gone
                if gone < retention.RETENTION_BATCH:
                    break
        self.expired += total
        return total

    def sweep(self) -> bool:
        """Compact the moved timer range if it grew since last time; True if it did."""
        watermark = self.store.get(CF.META, keys.WATERMARK_KEY)
        if watermark is None or watermark <= self._reclaimed:
            return False
        self.store.compact(CF.TIMERS, None, watermark)
        self._reclaimed = watermark
        self.compactions += 1
        return True

    def run(self) -> None:
        next_sweep = self.clock.now_ms() + self.interval_ms
        while not self.stopping:
            self.clock.wait(self._wake, next_sweep)
            # Clear the wake-up, or every later wait returns at once (FakeClock.advance sets
            # it to make waiters look at the clock again): a busy loop of compactions.
            self._wake.clear()
            if self.stopping:
                return
            if self.clock.now_ms() < next_sweep:
                continue
            next_sweep = self.clock.now_ms() + self.interval_ms
            try:
                self.sweep()
                self.retain()
            except (StorageError, WriterStopped) as exc:
                log.warning("sweep failed: %s", exc)
