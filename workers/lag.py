"""How far deliveries are behind, and the admission control that keeps them on time.

The due backlog is every timer whose time has come and that is not in its topic log yet:
picked up by the scanner (held, on the put queue, being moved) or still in the store
ahead of the scanner's cursor. Its oldest member's age is the lateness every delivery
is about to have. When that age passes the limit (a Setting), new sends are refused with
429 and Retry-After until it has fallen back to half the limit (hysteresis: no flapping
at the edge), so producers back off before lateness grows without bound; consumers,
acks and cancels are never refused by it (they drain the service).
"""

from __future__ import annotations

import queue

from storage import keys
from storage.errors import Overloaded
from storage.store import CF, RocksStore
from workers.clock import Clock
from workers.deliverer import Deliverer
from workers.scanner import Chunk, Scanner

DUE_COUNT_CAP = 10_000  # due keys counted ahead of the scanner for the backlog gauge:
# the count walks keys on the caller's thread; past this, the oldest age tells the rest
DUE_COUNT_TTL_MS = 1_000  # the count ahead of the scanner is reused this long: /metrics
# polled every 20 ms through a storm walked 10k keys each time, ~5 ms of the GIL a scrape in
# a storm; reused for 100 ms it was still 4 % of the storm's GIL samples (py-spy --gil)
RETRY_AFTER_S = 1  # what a refused send is told; the backlog drains at ~100k timers/s


class DeliveryLag:
    """Reads the deliverer's, put queue's and scanner's state; never blocks them."""

    def __init__(
        self,
        clock: Clock,
        store: RocksStore,
        scanner: Scanner,
        put_queue: queue.Queue[Chunk],
        deliverer: Deliverer,
        limit_ms: int,
    ) -> None:
        self.clock = clock
        self.store = store
        self.scanner = scanner
        self.put_queue = put_queue
        self.deliverer = deliverer
        self.limit_ms = limit_ms
        self.refusing = False
        self.refused = 0  # sends refused so far
        self._counted: tuple[int, int] | None = None  # (when, due keys ahead of the scanner)

    def oldest_due_ms(self, now_ms: int) -> int | None:
        """The due time of the oldest timer not yet delivered (None: nothing is due).

        Timers flow scanner -> put queue -> deliverer in due order, so the first found
        downstream is the oldest. Lock-free reads of moving state (this runs before every
        send): good for a gauge and a threshold, not an exact snapshot.
        """
        moving = self.deliverer.moving
        if moving:
            return keys.read_u64(moving[0][0])
        try:
            return keys.read_u64(self.put_queue.queue[0][0][0])
        except IndexError:  # empty (or emptied while we looked)
            pass
        if self.scanner.held_due is not None:
            return self.scanner.held_due
        nxt = self.scanner.next_due_ms
        return nxt if nxt is not None and nxt <= now_ms else None

    def age_ms(self) -> int:
        """How long the oldest due timer not yet delivered has been due (0: on time)."""
        now = self.clock.now_ms()
        oldest = self.oldest_due_ms(now)
        return now - oldest if oldest is not None and oldest < now else 0

    def timers(self) -> int:
        """Due timers not yet delivered: all those picked up, and the ones ahead of the
        scanner counted up to DUE_COUNT_CAP."""
        with self.put_queue.mutex:
            queued = sum(len(chunk) for chunk in self.put_queue.queue)
        picked_up = len(self.deliverer.moving or ()) + queued + self.scanner.held
        nxt = self.scanner.next_due_ms
        now = self.clock.now_ms()
        if nxt is None or nxt > now:
            return picked_up
        counted = self._counted
        if counted is None or not 0 <= now - counted[0] < DUE_COUNT_TTL_MS:
            end = keys.due_bound(now + 1)
            ahead = self.store.count(CF.TIMERS, self.scanner.cursor, end, DUE_COUNT_CAP)
            self._counted = counted = (now, ahead)
        return picked_up + counted[1]

    def lagging(self) -> bool:
        """Deliveries are behind by more than the limit (or not yet back under half of it)."""
        age = self.age_ms()
        if age > self.limit_ms:
            self.refusing = True
        elif age <= self.limit_ms // 2:
            self.refusing = False
        return self.refusing

    def admit(self) -> None:
        """Raise Overloaded (429 + Retry-After) for a send while deliveries lag."""
        if self.lagging():
            self.refused += 1
            raise Overloaded(
                RETRY_AFTER_S,
                f"deliveries are {self.age_ms()} ms behind (limit {self.limit_ms} ms): "
                "new messages are refused until they catch up",
            )
