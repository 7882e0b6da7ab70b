"""Txn: the staged writes of one group commit, readable before they are written."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from storage.keys import PENDING_KEY
from storage.store import CF, Delete, DeleteRange, Put, RocksStore, WriteOp

_MISSING = object()


class Txn:
    """Reads see the store plus everything staged so far in this batch (read-your-writes).

    Each op runs inside a savepoint: if it raises, its staged writes are rolled back and
    the other ops of the batch are untouched, so one bad request never writes half.
    Range deletes are not visible to reads; they only ever cover timer keys that the
    batch has already moved (see Writer).
    """

    def __init__(self, store: RocksStore, now_ms: int) -> None:
        self.store = store
        self.now_ms = now_ms
        self.sync = False
        self.pending_delta = 0
        self.min_new_due: int | None = None
        self.woken_topics: set[str] = set()
        self.lateness_ms: list[int] = []
        self._overlay: dict[tuple[CF, bytes], bytes | None] = {}
        self._ranges: list[DeleteRange] = []
        self._undo: list[tuple[tuple[CF, bytes], object]] = []
        self._hooks: list[Callable[[], None]] = []

    # --- reads ---------------------------------------------------------------------------

    def get(self, cf: CF, key: bytes) -> bytes | None:
        staged = self._overlay.get((cf, key), _MISSING)
        if staged is not _MISSING:
            return staged  # type: ignore[return-value]
        return self.store.get(cf, key)

    def get_many(self, cf: CF, keys: Sequence[bytes]) -> list[bytes | None]:
        out: list[bytes | None] = []
        missing: list[int] = []
        for i, key in enumerate(keys):
            staged = self._overlay.get((cf, key), _MISSING)
            out.append(None if staged is _MISSING else staged)  # type: ignore[arg-type]
            if staged is _MISSING:
                missing.append(i)
        if missing:
            found = self.store.get_many(cf, [keys[i] for i in missing])
            for i, value in zip(missing, found, strict=True):
                out[i] = value
        return out

    # --- writes --------------------------------------------------------------------------

    def put(self, cf: CF, key: bytes, value: bytes) -> None:
        self._stage((cf, key), value)

    def delete(self, cf: CF, key: bytes) -> None:
        self._stage((cf, key), None)

    def delete_range(self, cf: CF, begin: bytes, end: bytes) -> None:
        self._ranges.append(DeleteRange(cf, begin, end))

    def add_pending(self, delta: int) -> None:
        self.pending_delta += delta

    def schedule_hint(self, due_ms: int) -> None:
        """A timer key was added: the scanner may have to wake earlier."""
        if self.min_new_due is None or due_ms < self.min_new_due:
            self.min_new_due = due_ms

    def on_commit(self, hook: Callable[[], None]) -> None:
        self._hooks.append(hook)

    def _stage(self, slot: tuple[CF, bytes], value: bytes | None) -> None:
        self._undo.append((slot, self._overlay.get(slot, _MISSING)))
        self._overlay[slot] = value

    # --- savepoints ----------------------------------------------------------------------

    def savepoint(self) -> tuple[int, int, int, int]:
        return (len(self._undo), len(self._ranges), self.pending_delta, len(self._hooks))

    def rollback(self, point: tuple[int, int, int, int]) -> None:
        """Undo everything staged since ``point`` (hints and wake-ups may stay: harmless)."""
        undo_len, ranges_len, pending, hooks_len = point
        while len(self._undo) > undo_len:
            slot, old = self._undo.pop()
            if old is _MISSING:
                del self._overlay[slot]
            else:
                self._overlay[slot] = old  # type: ignore[assignment]
        del self._ranges[ranges_len:]
        del self._hooks[hooks_len:]
        self.pending_delta = pending

    # --- commit --------------------------------------------------------------------------

    def write_ops(self, pending_total: int) -> list[WriteOp]:
        """Range deletes first (they cover only moved keys), then each key's final value."""
        ops: list[WriteOp] = list(self._ranges)
        for (cf, key), value in self._overlay.items():
            ops.append(Delete(cf, key) if value is None else Put(cf, key, value))
        if self.pending_delta:
            ops.append(Put(CF.META, PENDING_KEY, pending_total.to_bytes(8, "big")))
        return ops

    def run_hooks(self) -> None:
        for hook in self._hooks:
            hook()

    @property
    def empty(self) -> bool:
        return not self._overlay and not self._ranges
