"""Txn: the staged writes of one group commit, readable before they are written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storage import keys
from storage.keys import PENDING_KEY
from storage.records import Counts, decode_counts, encode_counts
from storage.store import CF, DeleteRange, RocksStore

_MISSING = object()


class Txn:
    """Reads see the store plus everything staged so far in this batch (read-your-writes).

    Each op runs inside a savepoint: if it raises, its staged writes are rolled back and
    the other ops of the batch are untouched, so one bad request never writes half.
    Range deletes are not visible to reads; they only ever cover timer keys that the
    batch has already moved (see Writer.scan_horizon).
    """

    def __init__(self, store: RocksStore, now_ms: int, cancels_committed: int = 0) -> None:
        self.store = store
        self.now_ms = now_ms
        self.cancels_committed = cancels_committed  # the writer's count before this batch
        self.cancels = 0  # cancels staged in this batch
        self.sync = False
        self.pending_delta = 0
        self.min_new_due: int | None = None
        self.woken_topics: set[str] = set()
        self.lateness_ms: list[int] = []
        # Counter deltas, merged into their meta keys at commit (same WriteBatch), and
        # events for the process's metrics (acks, nacks, …), read by the commit hook.
        # Both are rolled back with the op that staged them.
        self.counts: dict[bytes, Counts] = {}
        self.events: dict[str, int] = {}
        # One dict per column family: key -> final value (None = delete).
        self._staged: dict[str, dict[bytes, bytes | None]] = {cf: {} for cf in CF.ALL}
        self._ranges: list[DeleteRange] = []
        self._undo: list[tuple[dict[Any, Any], Any, object]] = []

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

    def count_topic(
        self, topic: str, scheduled: int = 0, delivered: int = 0, cancelled: int = 0
    ) -> None:
        """Move a topic's counts (listed by GET /v1/topics); scheduled is the pending total's
        share of the topic."""
        self._count(keys.topic_counts_key(topic), (scheduled, delivered, cancelled))
        self.pending_delta += scheduled

    def count_group(
        self, topic: str, group: str, inflight: int = 0, retrying: int = 0, dead: int = 0
    ) -> None:
        """Move a group's counts on a topic (GET /v1/topics/{topic}/groups, /metrics)."""
        self._count(keys.group_counts_key(topic, group), (inflight, retrying, dead))

    def _count(self, key: bytes, delta: Counts) -> None:
        counts = self.counts
        old = counts.get(key)
        self._undo.append((counts, key, _MISSING if old is None else old))
        counts[key] = (
            delta if old is None else (old[0] + delta[0], old[1] + delta[1], old[2] + delta[2])
        )

    def note(self, event: str, n: int = 1) -> None:
        """Count an event for the metrics (acks, nacks, expiries, dead letters, redrives)."""
        events = self.events
        old = events.get(event)
        self._undo.append((events, event, _MISSING if old is None else old))
        events[event] = (old or 0) + n

    def schedule_hint(self, due_ms: int) -> None:
        """A timer key was added: the scanner may have to wake earlier."""
        if self.min_new_due is None or due_ms < self.min_new_due:
            self.min_new_due = due_ms

    # --- savepoints ----------------------------------------------------------------------

    def savepoint(self) -> tuple[int, int, int]:
        return (len(self._undo), len(self._ranges), self.pending_delta)

    def rollback(self, point: tuple[int, int, int]) -> None:
        """Undo everything staged since ``point`` (hints and wake-ups may stay: harmless)."""
        undo_len, ranges_len, pending = point
        while len(self._undo) > undo_len:
            staged, key, old = self._undo.pop()
            if old is _MISSING:
                del staged[key]
            else:
                staged[key] = old
        del self._ranges[ranges_len:]
        self.pending_delta = pending

    # --- commit --------------------------------------------------------------------------

    def commit(self, pending_total: int) -> None:
        """Write everything staged as one WriteBatch (range deletes first), unsynced: the
        writer's Syncer fsyncs the WAL before any durable op is answered."""
        if self.pending_delta:
            self._staged[CF.META][PENDING_KEY] = pending_total.to_bytes(8, "big")
        meta = self._staged[CF.META]
        for key, (a, b, c) in self.counts.items():
            if a or b or c:
                x, y, z = decode_counts(self.get(CF.META, key))
                meta[key] = encode_counts((x + a, y + b, z + c))
        self.store.write_staged(self._ranges, self._staged, sync=False)

    @property
    def empty(self) -> bool:
        return not self._ranges and not any(self._staged.values()) and not self.counts
