"""The sweeper: reclaims the timer range the deliverer has already moved.

Moves remove their span with a range delete and advance a watermark; compacting
``[start, watermark)`` now and then drops those tombstones from disk, so a store that has
delivered millions of timers scans its due range as fast as a fresh one.
"""

from __future__ import annotations

import logging

from storage import keys
from storage.errors import StorageError
from storage.store import CF, RocksStore
from workers.clock import Clock
from workers.thread import WorkerThread

log = logging.getLogger("rocktimer.sweeper")


class Sweeper(WorkerThread):
    name = "rocktimer-sweeper"

    def __init__(self, store: RocksStore, clock: Clock, interval_ms: int) -> None:
        super().__init__()
        self.store = store
        self.clock = clock
        self.interval_ms = interval_ms
        self.compactions = 0
        self._reclaimed: bytes = b""

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
            except StorageError as exc:
                log.warning("sweep failed: %s", exc)
