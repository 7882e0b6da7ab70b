"""The exporter: seals the event log into Parquet segments, off the request path.

At least every ``seal_ms`` it takes the events in the ``events`` CF, oldest first, in
segments of at most ``segment_rows`` events of one UTC day (a batch's events are never
split, so a segment may exceed that by one batch), has each written (workers/sealer.py:
by a child process, off the server's GIL; workers/segments.py: the files), and then
deletes its range from the CF through the writer. A crash between the two leaves the
range in the CF; the next export finds the segment that starts there and writes that same
range under that same name again: no second copy, no lost event. Memory is bounded by
one segment. Segments older than ``retention_ms`` are deleted.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

from storage import events, keys
from storage.errors import StorageError, WriterStopped
from storage.store import CF, RocksStore
from storage.txn import Txn
from workers import gil
from workers.clock import Clock
from workers.sealer import ProcessSealer, Sealer, ThreadSealer
from workers.thread import Periodic
from workers.writer import Writer

SEGMENT_ROWS = 100_000  # events per segment: ~20 MB of columns in memory while sealed
SCAN_VALUES = 64  # CF values (one batch's events each) read per scan
DEFER_LAG_MS = 20  # deliveries this far behind (a storm draining): a round waits for them
# (at 100 a seal ran through the first tenth of a 1 s storm's drain and cost it ~20 %;
# steady timers at 5,000/s stay well below 20 ms behind)
DEFER_MAX_MS = 30_000  # but no longer than this (the events wait in the CF meanwhile)
DEFER_POLL_S = 0.05
EVENTS_DIR = "events"  # under the data dir (pipeline.md)
_END = b"\xff" * 9  # past every event key


class Picked(NamedTuple):
    entries: list[tuple[bytes, bytes]]
    day: str
    first: int
    last: int


class Exporter(Periodic):
    name = "rocktimer-exporter"
    expected = (StorageError, WriterStopped, OSError)  # logged; the next seal retries

    def __init__(
        self,
        store: RocksStore,
        writer: Writer,
        clock: Clock,
        *,
        seal_ms: int,
        retention_ms: int,
        segment_rows: int = SEGMENT_ROWS,
        behind: Callable[[], int] | None = None,
        in_process: bool = True,
        partition: int = 0,
    ) -> None:
        # At start at once: what a crash left behind is sealed first.
        super().__init__(clock, seal_ms, at_start=True)
        self.store = store
        self.writer = writer
        self.retention_ms = retention_ms
        self.segment_rows = segment_rows
        self.behind = behind  # how far deliveries are behind, ms (workers/lag.py)
        self.deferred_ms = 0  # how long rounds waited for deliveries, in all
        self._round_started = 0  # a round waits DEFER_MAX_MS from its start, at most
        self.root = os.path.join(store.path, EVENTS_DIR)
        self.partition = partition  # the data dir's partition, a column of every segment
        self.sealed = 0  # segments written
        self.exported = 0  # events sealed
        self.rounds = 0  # exports run by the thread
        self._from = b""  # every event before this key is sealed and deleted
        self._newest: dict[str, int] = {}  # segment path -> its newest event_time_ms
        # Where segments are decoded and written (workers/sealer.py): a child process, so
        # that numpy and zstd never hold the server's GIL; or this thread.
        self.sealer: Sealer = ProcessSealer() if in_process else ThreadSealer(self._give_way)

    def stop(self) -> None:
        super().stop()
        self.sealer.close()

    def tick(self) -> None:
        self._round_started = self.clock.now_ms()
        try:
            self.export()
            self.expire()
        finally:
            self.rounds += 1

    def _give_way(self) -> None:
        """Between two slices of a round: let due timers have the GIL (gil.give_way); while
        a storm of them drains, wait (until DEFER_MAX_MS into the round): a seal took ~14 % of
        the GIL's samples from a storm's moves, and nothing is late for an
        export."""
        gil.give_way()
        if self.behind is None:
            return
        started = self.clock.now_ms()
        try:
            while not self.stopping and self.behind() > DEFER_LAG_MS:
                if self.clock.now_ms() - self._round_started >= DEFER_MAX_MS:
                    return
                self._stop.wait(DEFER_POLL_S)
        finally:
            self.deferred_ms += self.clock.now_ms() - started

    def export(self) -> int:
        """Seal every event in the store; returns how many were sealed."""
        # Imported here, not at the top: a restart does not wait for it.
        # It imports no pyarrow: sealing does, in the sealer's process (~50 MiB of RSS).
        from workers import segments

        if not self._from:
            segments.remove_hidden(self.root)
        # Up to the events there now: what arrives while this round writes waits for the
        # next one. Chasing it sealed a stream of tiny segments back to back under a
        # steady load (1,700 schedule fires/s: a quarter of a core, and thousands
        # of files a day for Spark to list).
        next_seq = self.store.get(CF.META, keys.EVENTS_NEXT_KEY)
        upto = keys.event_key(keys.read_u64(next_seq)) if next_seq else _END
        total = 0
        while not self.stopping:
            picked = self._pick(upto)
            if picked is None:
                break
            self._give_way()
            # What was read may sit in the WAL unsynced: fsync it before the segment
            # exists, or a power cut could keep an event whose change it took away.
            self.store.sync_wal()
            rows = self.sealer.seal(
                self.root, picked.entries, picked.day, picked.first, picked.last, self.partition
            )
            end = keys.event_key(picked.last + 1)
            self.writer.call(partial(_forget, begin=picked.entries[0][0], end=end), durable=False)
            self._from = end
            self.sealed += 1
            self.exported += rows
            total += rows
        return total

    def expire(self) -> int:
        """Delete segments past the retention; returns how many."""
        from workers import segments

        return segments.expire(self.root, self.clock.now_ms() - self.retention_ms, self._newest)

    def _pick(self, upto: bytes) -> Picked | None:
        """The next segment's events before the key ``upto``: the range an earlier export
        sealed (then crashed), or up to ``segment_rows`` events of one day."""
        from workers import segments

        first_entries = self.store.scan(CF.EVENTS, self._from, upto, 1)
        if not first_entries:
            return None
        first = keys.read_u64(first_entries[0][0])
        done = segments.sealed_from(self.root, first)
        fixed_last: int | None = done.last if done is not None else None
        cursor = first_entries[0][0]
        picked: list[tuple[bytes, bytes]] = []
        rows, day_start = 0, -1  # the segment's UTC day, from its first value
        while True:
            found = self.store.scan(CF.EVENTS, cursor, upto, SCAN_VALUES)
            for key, value in found:
                n, at_ms = events.count_and_time(value)
                if fixed_last is not None:
                    if keys.read_u64(key) > fixed_last:
                        return Picked(picked, segments.day_of(day_start), first, fixed_last)
                elif picked and (
                    rows + n > self.segment_rows or not 0 <= at_ms - day_start < segments.DAY_MS
                ):
                    return Picked(picked, segments.day_of(day_start), first, first + rows - 1)
                if not picked:
                    day_start = at_ms - at_ms % segments.DAY_MS
                picked.append((key, value))
                rows += n
            if len(found) < SCAN_VALUES:
                last = fixed_last if fixed_last is not None else first + rows - 1
                return Picked(picked, segments.day_of(day_start), first, last)
            cursor = keys.successor(found[-1][0])


def _forget(txn: Txn, begin: bytes, end: bytes) -> None:
    """Delete sealed events from the store (one range tombstone)."""
    txn.delete_range(CF.EVENTS, begin, end)
