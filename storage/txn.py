"""Txn: the staged writes of one group commit, readable before they are written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from storage import events, keys
from storage.keys import EVENTS_NEXT_KEY, PENDING_KEY, event_key, next_seq_key, read_u64, u64
from storage.records import Counts, decode_counts, encode_counts
from storage.store import CF, DeleteRange, RocksStore

_MISSING = object()
_MANY = object()  # an undo entry's key when it undoes a whole put_many
# Fewer seqs than this are read with a multi-get, not a scan (Txn.get_seqs): a scan's
# iterator costs ~11 µs before its first key, a multi-get ~1 µs a key (rocksdict, 2 cores).
SCAN_MIN_SEQS = 8
# The meta values a writer keeps between batches (Txn, meta): past this many keys it
# starts again from empty (a cursor, a lane end and a group's counts each take one).
META_CACHE_KEYS = 65_536
_HAS_ANY_PAGE = 64  # keys read at a time by has_any
# undo log length, range deletes, pending delta, staged events (storage/events.py)
Savepoint = tuple[int, int, int, tuple[int, int]]


class Txn:
    """Reads see the store plus everything staged so far in this batch (read-your-writes).

    Each op runs inside a savepoint: if it raises, its staged writes are rolled back and
    the other ops of the batch are untouched, so one bad request never writes half.
    Range deletes are not visible to reads; they only ever cover timer keys that the
    batch has already moved (see Writer.scan_horizon), or a retry lane's entries its one
    reader has passed (or left behind when its topic's log was forgotten: its end is gone
    with them). Everything else is deleted key by key, so that each op sees what the ops
    before it in the batch did (retention beside a receive, issue 10.3).
    """

    def __init__(
        self,
        store: RocksStore,
        now_ms: int,
        cancels_committed: int = 0,
        *,
        log_events: bool = True,
        meta: dict[bytes, bytes | None] | None = None,
    ) -> None:
        self.store = store
        # The meta CF's values as the commits left them (key -> value, None: absent), kept
        # by the one writer across its batches: the small keys every op reads (cursors,
        # lane ends, counters, group settings) cost a store read each otherwise, several
        # per receive or ack, on the path a long-polling consumer waits on. Filled by reads,
        # updated by commits; emptied by the writer when a commit fails.
        self.meta = meta
        self.now_ms = now_ms
        self.cancels_committed = cancels_committed  # the writer's count before this batch
        self.cancels = 0  # cancels and reschedules staged in this batch (see move_due)
        self.sync = False
        self.pending_delta = 0
        self.min_new_due: int | None = None
        self.woken_topics: set[str] = set()
        # (topic, group) that a receive served in this batch read to the end (Engine)
        self.drained: list[tuple[str, str]] = []
        self.lateness_ms: list[int] = []
        # The next seq of each lane appended to in this batch (workers/ops/lanes.py): counted
        # here, written once at commit instead of once per append.
        self.lane_next: dict[bytes, int] = {}
        self._lanes_saved: set[bytes] = set()  # lanes whose undo is recorded since the savepoint
        # The events staged so far (workers/ops/events.py); None when the event log is off.
        self.events: events.Staged | None = events.Staged() if log_events else None
        # Counter deltas, merged into their meta keys at commit (same WriteBatch), and
        # events for the process's metrics (acks, nacks, …), read by the commit hook.
        # Both are rolled back with the op that staged them.
        self.counts: dict[bytes, Counts] = {}
        self.tallies: dict[str, int] = {}
        # One dict per column family: key -> final value (None = delete).
        self._staged: dict[str, dict[bytes, bytes | None]] = {cf: {} for cf in CF.ALL}
        self._ranges: list[DeleteRange] = []
        self._undo: list[tuple[dict[Any, Any], Any, object]] = []

    # --- reads ---------------------------------------------------------------------------

    def get(self, cf: str, key: bytes) -> bytes | None:
        staged = self._staged[cf]
        if key in staged:
            return staged[key]
        if cf == CF.META and self.meta is not None:
            value = self.meta.get(key, _MISSING)
            if value is _MISSING:
                value = self.meta[key] = self.store.get(cf, key)
            return cast(bytes | None, value)
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

    def get_seqs(self, cf: str, prefix: bytes, seqs: Sequence[int]) -> list[bytes | None]:
        """``get_many`` of ``prefix ‖ u64(seq)`` for each seq. Seqs close together (an ack's
        lot: what one receive took from a lane) are read with one bounded scan, a quarter
        of a multi-get's cost a key in rocksdict; a few, or scattered ones, with a
        multi-get."""
        if not seqs:
            return []
        keys_ = [prefix + u64(seq) for seq in seqs]
        low, high = min(seqs), max(seqs)
        if len(seqs) < SCAN_MIN_SEQS or high - low >= 2 * len(seqs):
            return self.get_many(cf, keys_)
        span = high - low + 1
        found = dict(self.scan(cf, prefix + u64(low), prefix + u64(high + 1), span))
        staged = self._staged[cf]  # a key written in this batch: as staged (None: deleted)
        return [staged[key] if key in staged else found.get(key) for key in keys_]

    def scan(
        self, cf: str, start: bytes, end: bytes, limit: int, *, new: bool = False
    ) -> list[tuple[bytes, bytes]]:
        """The store's entries in ``[start, end)`` as this batch left them so far: deleted
        ones dropped, changed ones with their staged value. Keys first written in this
        batch are added only with ``new`` (it walks every staged key of the CF: for small
        meta scans; a lane's reader never passes them anyway, see workers/ops/lanes.py)."""
        found = self.store.scan(cf, start, end, limit)
        staged = self._staged[cf]
        if not staged:
            return found
        out = {key: staged.get(key, value) for key, value in found}
        if new:
            out.update((k, v) for k, v in staged.items() if start <= k < end and k not in out)
        live = [(k, v) for k, v in out.items() if v is not None]
        if new:
            live.sort()
        return live[:limit]

    def has_any(self, cf: str, start: bytes, end: bytes) -> bool:
        """Whether ``[start, end)`` holds a key as this batch left it so far (a page at a
        time past the keys it deleted: ``scan(limit=1)`` may find only a deleted one)."""
        staged = self._staged[cf]
        if any(start <= k < end and v is not None for k, v in staged.items()):
            return True
        while found := self.store.scan(cf, start, end, _HAS_ANY_PAGE):
            if any(staged.get(key, value) is not None for key, value in found):
                return True
            if len(found) < _HAS_ANY_PAGE:
                return False
            start = keys.successor(found[-1][0])
        return False

    # --- writes --------------------------------------------------------------------------

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        staged = self._staged[cf]
        self._undo.append((staged, key, staged.get(key, _MISSING)))
        staged[key] = value

    def put_many(self, cf: str, pairs: Sequence[tuple[bytes, bytes]]) -> None:
        """``put`` of each (key, value), in order (the storm path: no call per key)."""
        staged = self._staged[cf]
        new = dict(pairs)
        # One undo entry for them all: the keys, and the values of those staged before
        # (a set intersection in C, not a lookup per key: 6 % of a storm's move).
        olds = {key: staged[key] for key in new.keys() & staged.keys()}
        self._undo.append((staged, _MANY, (list(new), olds)))
        staged.update(new)

    def delete(self, cf: str, key: bytes) -> None:
        staged = self._staged[cf]
        self._undo.append((staged, key, staged.get(key, _MISSING)))
        staged[key] = None

    def claim_seq(self, lane: bytes, n: int = 1) -> int:
        """The lane's next seq, counted as taken with the ``n - 1`` after it
        (workers/ops/lanes.py): read from meta once per batch, then counted here; undone with
        the op like a staged write."""
        lane_next = self.lane_next
        seq = lane_next.get(lane)
        if lane not in self._lanes_saved:  # the first change since the savepoint: undoable
            self._undo.append((lane_next, lane, _MISSING if seq is None else seq))
            self._lanes_saved.add(lane)
        if seq is None:
            seq = self.lane_end(lane)
        lane_next[lane] = seq + n
        return seq

    def lane_end(self, lane: bytes) -> int:
        """The lane's next seq: no entry of it is at this seq or after (workers/ops/lanes.py)."""
        seq = self.lane_next.get(lane)
        if seq is None:
            raw = self.get(CF.META, next_seq_key(lane))
            seq = read_u64(raw) if raw else 0
        return seq

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

    def counted(self, key: bytes) -> Counts:
        """A counts key's values as this batch leaves them so far (its deltas included)."""
        x, y, z = decode_counts(self.get(CF.META, key))
        delta = self.counts.get(key)
        return (x, y, z) if delta is None else (x + delta[0], y + delta[1], z + delta[2])

    def drop_counts(self, key: bytes) -> None:
        """Delete a counts key and this batch's deltas to it (its thing is gone: a topic or
        a group's record of one); a later count in the batch starts it again from zero."""
        counts = self.counts
        old = counts.get(key)
        self._undo.append((counts, key, _MISSING if old is None else old))
        counts[key] = (0, 0, 0)  # nothing to merge at commit
        self.delete(CF.META, key)

    def _count(self, key: bytes, delta: Counts) -> None:
        counts = self.counts
        old = counts.get(key)
        self._undo.append((counts, key, _MISSING if old is None else old))
        counts[key] = (
            delta if old is None else (old[0] + delta[0], old[1] + delta[1], old[2] + delta[2])
        )

    def note(self, event: str, n: int = 1) -> None:
        """Count an event for the metrics (acks, nacks, expiries, dead letters, redrives)."""
        tallies = self.tallies
        old = tallies.get(event)
        self._undo.append((tallies, event, _MISSING if old is None else old))
        tallies[event] = (old or 0) + n

    def schedule_hint(self, due_ms: int) -> None:
        """A timer key was added: the scanner may have to wake earlier."""
        if self.min_new_due is None or due_ms < self.min_new_due:
            self.min_new_due = due_ms

    # --- savepoints ----------------------------------------------------------------------

    def savepoint(self) -> Savepoint:
        self._lanes_saved.clear()
        events = self.events  # Staged.mark, inlined: a savepoint is taken for every op
        staged_events = (len(events.heads), len(events.extras)) if events is not None else (0, 0)
        return (len(self._undo), len(self._ranges), self.pending_delta, staged_events)

    def rollback(self, point: Savepoint) -> None:
        """Undo everything staged since ``point`` (hints and wake-ups may stay: harmless)."""
        undo_len, ranges_len, pending, staged_events = point
        while len(self._undo) > undo_len:
            staged, key, old = self._undo.pop()
            if key is _MANY:  # put_many's: (its keys, the values they had before)
                many, olds = cast(tuple[list[bytes], dict[bytes, Any]], old)
                for each in many:
                    if each in olds:
                        staged[each] = olds[each]
                    else:
                        del staged[each]
            elif old is _MISSING:
                del staged[key]
            else:
                staged[key] = old
        del self._ranges[ranges_len:]
        if self.events is not None:
            self.events.undo(staged_events)
        self.pending_delta = pending
        self._lanes_saved.clear()

    # --- commit --------------------------------------------------------------------------

    def commit(self, pending_total: int) -> None:
        """Write everything staged as one WriteBatch (range deletes first), unsynced: the
        writer's Syncer fsyncs the WAL before any durable op is answered."""
        meta = self._staged[CF.META]
        if self.pending_delta:
            meta[PENDING_KEY] = pending_total.to_bytes(8, "big")
        for lane, seq in self.lane_next.items():
            meta[next_seq_key(lane)] = u64(seq)
        for key, (a, b, c) in self.counts.items():
            if a or b or c:
                x, y, z = decode_counts(self.get(CF.META, key))
                meta[key] = encode_counts((x + a, y + b, z + c))
        if self.events:
            # The events and the counter that numbers them go in this same batch: a crash
            # keeps both or neither, and a seq is never handed out twice.
            raw = self.get(CF.META, EVENTS_NEXT_KEY)
            seq = read_u64(raw) if raw else 0
            self._staged[CF.EVENTS][event_key(seq)] = self.events.encode(self.now_ms)
            meta[EVENTS_NEXT_KEY] = event_key(seq + len(self.events))
        self.store.write_staged(self._ranges, self._staged, sync=False)
        if self.meta is not None:
            if len(self.meta) + len(meta) > META_CACHE_KEYS or any(
                r.cf == CF.META for r in self._ranges
            ):
                self.meta.clear()
            self.meta.update(meta)

    def written(self) -> tuple[list[DeleteRange], dict[str, dict[bytes, bytes | None]]]:
        """What ``commit`` wrote: its ``write_staged`` arguments (a changelog record's
        content in cluster mode). Not to be changed afterwards."""
        return self._ranges, self._staged

    @property
    def empty(self) -> bool:
        return (
            not self._ranges
            and not any(self._staged.values())
            and not self.events
            and not self.counts
        )
