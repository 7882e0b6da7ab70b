"""The scanner: finds due timer keys with one range scan and has them moved.

A span of a few due timers (not a full chunk) found while the deliverer has nothing
queued or in hand, it moves itself, on this thread (Deliverer.move_here): timers falling
due at a steady rate are scanned, moved and handed to the consumers waiting for them in
one turn of one thread. Full chunks (a storm) go to the deliverer through the put queue.

It sleeps until the earliest timer key is due (or until the writer commits an earlier
one), then scans ``[cursor, horizon]`` in chunks of ``chunk`` keys onto the bounded put
queue. A full queue blocks it: that is what keeps ten million timers falling due in the
same millisecond from ever being in memory at once. It holds at most one chunk. While
timers fall due back to back it scans at most once every ``pace_ms`` (MOVE_PACE_MS).
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Iterable
from typing import TYPE_CHECKING

from storage import keys
from storage.errors import StorageError
from storage.store import CF, RocksStore
from workers import gil
from workers.clock import Clock
from workers.thread import WorkerThread
from workers.writer import Writer

if TYPE_CHECKING:
    from workers.deliverer import Deliverer

log = logging.getLogger("rocktimer.scanner")

SCAN_CHUNK = 2_000  # keys per range scan; RocketMQ RIP-82 scans the same per round
# While timers fall due back to back, at most one scan (so one move) this often: a move's
# fixed cost (~250 µs of CPU here: a batch, a commit, its events) is most of what a few
# timers cost, and at 5,000 timers/s a move every millisecond took 0.45 of a core; every
# 2 ms, 0.29. A timer due after a quiet spell is scanned at once.
MOVE_PACE_MS = 2
PUT_QUEUE_CHUNKS = 4  # chunks waiting for the deliverer: ~8k timers in memory at most
BUSY_BACKOFF_MS = 1  # a due key beyond the scan horizon: the writer is mid-commit
HORIZON_WAIT_S = 0.05  # longest wait for a batch in progress to end (then rescan anyway)
_END = b"\xff" * 9  # past every timer key
STORAGE_RETRY_S = 0.1  # pause after a failed scan before the next


class Chunk(list[tuple[bytes, bytes]]):
    """Due timer entries in key order, with the writer's count of committed cancels read
    just before the scan: if no cancel committed since, the move can skip re-reading the
    index (Writer.cancels_committed)."""

    __slots__ = ("cancel_mark",)

    def __init__(
        self, entries: Iterable[tuple[bytes, bytes]] = (), cancel_mark: int | None = None
    ) -> None:
        super().__init__(entries)
        self.cancel_mark = cancel_mark


def _resume_cursor(watermark: bytes | None, now_ms: int) -> bytes:
    """Where a restarted scan starts: past the span moved before (the watermark), unless
    the clock is now behind it (stepped back across the restart). Then keys can be sent
    due between now and the watermark, and every key at or before now must be due whatever
    the watermark says (invariant 3): scan from the start, once."""
    cursor = keys.trusted_watermark(watermark, now_ms)
    if watermark and not cursor:
        moved_up_to = keys.read_u64(watermark)
        log.warning(
            "the clock is %d ms behind the last delivery (due %d ms): the clock stepped "
            "back; scanning every timer from the start",
            moved_up_to - now_ms,
            moved_up_to,
        )
    return cursor


class Scanner(WorkerThread):
    name = "rocktimer-scanner"

    def __init__(
        self,
        store: RocksStore,
        writer: Writer,
        clock: Clock,
        put_queue: queue.Queue[Chunk],
        chunk: int = SCAN_CHUNK,
        pace_ms: int = MOVE_PACE_MS,
        deliverer: Deliverer | None = None,
    ) -> None:
        """``deliverer``: the one draining ``put_queue``; when given, small spans are moved
        on this thread while it has nothing to do (see the module's doc)."""
        super().__init__()
        self.store = store
        self.writer = writer
        self.clock = clock
        self.put_queue = put_queue
        self.chunk = chunk
        self.pace_ms = pace_ms
        self.deliverer = deliverer
        self.cursor = _resume_cursor(store.get(CF.META, keys.WATERMARK_KEY), clock.now_ms())
        self.held = 0  # keys in hand right now (introspection for tests and metrics)
        self.held_due: int | None = None  # the due time of the first of them
        self.held_max = 0
        self.scans = 0
        # The first timer key ahead of the cursor is due then (None: no key): after a full
        # chunk, the last key handed over (what follows is due no earlier).
        self.next_due_ms: int | None = None
        self._sleep_until: int | None = None
        # No scan before then: a part chunk was just handed over (see MOVE_PACE_MS).
        self._paced_until = 0

    def hint(self, due_ms: int) -> None:
        """The writer committed a timer due at ``due_ms``: wake if that is earlier."""
        sleep_until = self._sleep_until
        if sleep_until is None or due_ms < sleep_until:
            self._wake.set()

    def run(self) -> None:
        while not self.stopping:
            try:
                self._round()
            except StorageError as exc:  # e.g. the writer is reopening the store
                log.warning("scan failed (%s); retrying", exc)
                self._stop.wait(STORAGE_RETRY_S)

    def _round(self) -> None:
        self._pace()
        if self.stopping:
            return
        # Order matters: forget the sleep target and clear the wake-up *before* scanning,
        # so a commit that lands after the scan always wakes the next wait.
        self._sleep_until = None
        self._wake.clear()
        horizon = self.writer.scan_horizon()
        mark = self.writer.cancels_committed  # read before the scan's snapshot is taken
        found = Chunk(
            self.store.scan(CF.TIMERS, self.cursor, keys.due_bound(horizon + 1), self.chunk),
            mark,
        )
        self.scans += 1
        if found:
            gil.fine()
            self._hand_over(found)
            if len(found) == self.chunk:
                self.next_due_ms = keys.read_u64(found[-1][0])
                return  # more may be due: scan again at once (a storm is not paced)
            self._paced_until = horizon + self.pace_ms
        # Everything due up to the horizon is handed over and no key can land there later
        # (Writer.scan_horizon): skip the tombstones of acked invisibility timers and
        # cancelled messages behind it instead of walking them again every round.
        if not self.stopping:
            self.cursor = max(self.cursor, keys.due_bound(horizon + 1))
        nxt = self.store.first_key(CF.TIMERS, self.cursor, _END)
        due = keys.read_u64(nxt) if nxt is not None else None
        self.next_due_ms = due
        if due is not None and due <= horizon:
            due = self.clock.now_ms() + BUSY_BACKOFF_MS
        elif due is not None and due <= self.clock.now_ms():
            # Due, but the batch being written holds the horizon back: wait for its end.
            self.writer.wait_horizon(due, HORIZON_WAIT_S)
            return
        self._sleep_until = due
        if due is None or due - self.clock.now_ms() > gil.LEAD_MS:
            gil.coarse()  # nothing due soon: wake LEAD_MS early to make it fine again
            self.clock.wait(self._wake, None if due is None else due - gil.LEAD_MS)
            return
        gil.fine()
        self.clock.wait(self._wake, due)

    def _pace(self) -> None:
        """Wait out the pace after a move. A wake-up does not end it (a timer sent due
        before its end waits for it too, at most ``pace_ms``); a stop does."""
        while self.clock.now_ms() < self._paced_until:
            self._wake.clear()
            if self.stopping:  # stop() sets the flag, then the wake-up: never lost
                return
            self.clock.wait(self._wake, self._paced_until)

    def _hand_over(self, found: Chunk) -> None:
        deliverer = self.deliverer
        if deliverer is not None and len(found) < self.chunk and deliverer.caught_up:
            if deliverer.move_here(found, lambda: self.stopping):
                self.cursor = keys.successor(found[-1][0])
            elif not self.stopping:  # the writer stopped: the keys stay timers
                self._stop.wait(STORAGE_RETRY_S)
            return
        self.held_due = keys.read_u64(found[0][0])
        self.held = len(found)
        self.held_max = max(self.held_max, self.held)
        if deliverer is not None:
            deliverer.handing_over()
        while not self.stopping:
            try:
                self.put_queue.put(found, timeout=0.1)
                break
            except queue.Full:
                continue
        else:
            if deliverer is not None:
                deliverer.handed_back()
            self.held, self.held_due = 0, None
            return  # stopping: these keys stay timers and are scanned again after restart
        self.cursor = keys.successor(found[-1][0])
        self.held, self.held_due = 0, None
