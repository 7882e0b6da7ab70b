"""Txn: the staged writes of one group commit, readable before they are written."""

from __future__ import annotations

from collections.abc import Sequence

from storage import events
from storage.keys import EVENTS_NEXT_KEY, PENDING_KEY, event_key, read_u64
from storage.store import CF, DeleteRange, RocksStore

_MISSING = object()


class Txn:
    """Reads see the store plus everything staged so far in this batch (read-your-writes).

    Each op runs inside a savepoint: if it raises, its staged writes are rolled back and
    the other ops of the batch are untouched, so one bad request never writes half.
    Range deletes are not visible to reads; they only ever cover timer keys that the
    batch has already moved (see Writer.scan_horizon).
    """

    def __init__(
        self, store: RocksStore, now_ms: int, cancels_committed: int = 0, *, log_events: bool = True
    ) -> None:
        self.store = store
        self.now_ms = now_ms
        self.cancels_committed = cancels_committed  # the writer's count before this batch
        self.cancels = 0  # cancels staged in this batch
        self.sync = False
        self.pending_delta = 0
        self.min_new_due: int | None = None
        self.woken_topics: set[str] = set()
        self.lateness_ms: list[int] = []
        # The events staged so far (workers/events.py); None when the event log is off.
        self.events: list[events.Staged] | None = [] if log_events else None
        # One dict per column family: key -> final value (None = delete).
        self._staged: dict[str, dict[bytes, bytes | None]] = {cf: {} for cf in CF.ALL}
        self._ranges: list[DeleteRange] = []
        self._undo: list[tuple[dict[bytes, bytes | None], bytes, object]] = []

    # --- reads ---------------------------------------------------------------------------

    def get(self, cf: str, key: bytes) -> bytes | None:
        staged = self._staged[cf]
        if key in staged:
            return staged[key]
        return self.store.get(cf, key)

    def get_many(self, cf: str, keys: Sequence[bytes]) -> list[bytes | None]:
        staged = self._staged[cf]
        if not staged:
            return self.store.get_many(cf, keys)
        missing = [i for i, key in enumerate(keys) if key not in staged]
        out = [staged.get(key) for key in keys]
        if missing:
            found = self.store.get_many(cf, [keys[i] for i in missing])
            for i, value in zip(missing, found, strict=True):
                out[i] = value
        return out

    # --- writes --------------------------------------------------------------------------

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        staged = self._staged[cf]
        self._undo.append((staged, key, staged.get(key, _MISSING)))
        staged[key] = value

    def delete(self, cf: str, key: bytes) -> None:
        staged = self._staged[cf]
        self._undo.append((staged, key, staged.get(key, _MISSING)))
        staged[key] = None

    def delete_range(self, cf: str, begin: bytes, end: bytes) -> None:
        self._ranges.append(DeleteRange(cf, begin, end))

    def add_pending(self, delta: int) -> None:
        self.pending_delta += delta

    def schedule_hint(self, due_ms: int) -> None:
        """A timer key was added: the scanner may have to wake earlier."""
        if self.min_new_due is None or due_ms < self.min_new_due:
            self.min_new_due = due_ms

    # --- savepoints ----------------------------------------------------------------------

    def savepoint(self) -> tuple[int, int, int, int]:
        staged_events = len(self.events) if self.events is not None else 0
        return (len(self._undo), len(self._ranges), self.pending_delta, staged_events)

    def rollback(self, point: tuple[int, int, int, int]) -> None:
        """Undo everything staged since ``point`` (hints and wake-ups may stay: harmless)."""
        undo_len, ranges_len, pending, staged_events = point
        while len(self._undo) > undo_len:
            staged, key, old = self._undo.pop()
            if old is _MISSING:
                del staged[key]
            else:
                staged[key] = old  # type: ignore[assignment]
        del self._ranges[ranges_len:]
        if self.events is not None:
            del self.events[staged_events:]
        self.pending_delta = pending

    # --- commit --------------------------------------------------------------------------

    def commit(self, pending_total: int) -> None:
        """Write everything staged as one WriteBatch (range deletes first), unsynced: the
        writer's Syncer fsyncs the WAL before any durable op is answered."""
        if self.pending_delta:
            self._staged[CF.META][PENDING_KEY] = pending_total.to_bytes(8, "big")
        if self.events:
            # The events and the counter that numbers them go in this same batch: a crash
            # keeps both or neither, and a seq is never handed out twice.
            raw = self.store.get(CF.META, EVENTS_NEXT_KEY)
            seq = read_u64(raw) if raw else 0
            value = events.encode(self.events, self.now_ms)
            self._staged[CF.EVENTS][event_key(seq)] = value
            self._staged[CF.META][EVENTS_NEXT_KEY] = event_key(seq + events.count(value))
        self.store.write_staged(self._ranges, self._staged, sync=False)

    @property
    def empty(self) -> bool:
        return not self._ranges and not any(self._staged.values()) and not self.events
