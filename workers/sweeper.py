"""The sweeper: reclaims the timer range the deliverer has already moved.

Moves remove their span with a range delete and advance a watermark; compacting
``[start, watermark)`` now and then drops those tombstones from disk, so a store that has
delivered millions of timers scans its due range as fast as a fresh one.
"""

from __future__ import annotations

import logging
import threading

from storage import keys
from storage.errors import StorageError
from storage.store import CF, RocksStore
from workers.clock import Clock

log = logging.getLogger("rocktimer.sweeper")


class Sweeper:
    def __init__(self, store: RocksStore, clock: Clock, interval_ms: int) -> None:
        self.store = store
        self.clock = clock
        self.interval_ms = interval_ms
        self.compactions = 0
        self._reclaimed: bytes = b""
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rocktimer-sweeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def sweep(self) -> bool:
        """Compact the moved timer range if it grew since last time; True if it did."""
        watermark = self.store.get(CF.META, keys.WATERMARK_KEY)
        if watermark is None or watermark <= self._reclaimed:
            return False
        self.store.compact(CF.TIMERS, None, watermark)
        self._reclaimed = watermark
        self.compactions += 1
        return True

    def _run(self) -> None:
        next_sweep = self.clock.now_ms() + self.interval_ms
        while not self._stop:
            self.clock.wait(self._wake, next_sweep)
            # Clear the wake-up, or every later wait returns at once (FakeClock.advance sets
            # it to make waiters look at the clock again): a busy loop of compactions.
            self._wake.clear()
            if self._stop:
                return
            if self.clock.now_ms() < next_sweep:
                continue
            next_sweep = self.clock.now_ms() + self.interval_ms
            try:
                self.sweep()
            except StorageError as exc:
                log.warning("sweep failed: %s", exc)
