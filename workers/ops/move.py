"""The span move: fire a scanned span of due timer keys through the kinds' table and
remove the span, in one batch (invariant 2)."""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

from storage import keys
from storage.store import CF
from storage.txn import Txn
from workers.ops import consume, messages, schedules
from workers.timers import invisible, retry, schedule
from workers.timers.kind import FireRun, Span

# Spans this long go with one range delete; shorter ones with point deletes. RocksDB
# walks every range tombstone in the memtable whenever it builds an iterator: at a steady
# few thousand timers/s, one per small move made each scan cost milliseconds (bench).
RANGE_DELETE_MIN = 512
_KEY, _TARGET_BYTE = itemgetter(0), itemgetter(8)  # a timer key's first byte after the due
_PERCENT = keys.INTERNAL_MARK.to_bytes(1, "big")

# Internal timers by target prefix; every other target is a topic: a scheduled message.
KINDS: dict[bytes, FireRun] = {
    invisible.PREFIX.encode(): consume.end_invisibility_run,
    retry.PREFIX.encode(): consume.end_retry_wait_run,
    schedule.PREFIX.encode(): schedules.fire_run,
}


def kind_of(key: bytes) -> FireRun:
    if keys.is_internal_timer(key):
        for prefix, fire_run in KINDS.items():
            if key.startswith(prefix, 8):
                return fire_run
    return messages.fire_run


def move_due(
    txn: Txn, entries: Sequence[tuple[bytes, bytes]], cancel_mark: int | None = None
) -> int:
    """Fire a contiguous span of due timer keys, as scanned; returns the messages delivered.

    ``cancel_mark`` (the writer's count of cancels and reschedules at scan time): when none
    has committed since and none is staged in this batch, every message timer of the span
    is live and the index need not be re-read (a timer key exists only while its index
    entry says scheduled at its due time). A long span is removed with one range delete:
    it holds exactly the scanned keys (Writer.scan_horizon); the watermark written beside
    it lets a restart seek past it.
    """
    if not entries:
        return 0
    unchanged = cancel_mark is not None and cancel_mark == txn.cancels_committed
    span = Span(txn, entries, recheck=not (unchanged and not txn.cancels))
    # In runs of one kind, in key order: a storm of messages is one run (one index
    # multi-get, one tight loop), and so are the schedules due in a scanned span.
    start = 0
    for fire_run, stop in _runs(entries):
        fire_run(span, start, stop)
        start = stop
    end = keys.successor(entries[-1][0])
    if len(entries) >= RANGE_DELETE_MIN:
        txn.delete_range(CF.TIMERS, entries[0][0], end)
    else:
        for key, _ in entries:
            txn.delete(CF.TIMERS, key)
    txn.put(CF.META, keys.WATERMARK_KEY, end)
    return span.moved


def _runs(entries: Sequence[tuple[bytes, bytes]]) -> list[tuple[FireRun, int]]:
    """The span cut into runs of timers of one kind: (its fire action, where it ends)."""
    runs: list[tuple[FireRun, int]] = []
    start = 0
    for i in _internal_at(entries):
        if start < i:  # the messages before this internal timer
            runs.append((messages.fire_run, i))
        fire_run = kind_of(entries[i][0])
        if runs and runs[-1] == (fire_run, i):  # the same kind as the timer before it
            runs[-1] = (fire_run, i + 1)
        else:
            runs.append((fire_run, i + 1))
        start = i + 1
    if start < len(entries):
        runs.append((messages.fire_run, len(entries)))
    return runs


def _internal_at(entries: Sequence[tuple[bytes, bytes]]) -> list[int]:
    """Where the internal timers are: the keys' first target bytes are gathered and searched
    for ``%`` in C (a Python loop over a storm's keys was 5 % of its move)."""
    firsts = bytes(map(_TARGET_BYTE, map(_KEY, entries)))
    at = []
    i = firsts.find(_PERCENT)
    while i != -1:
        if keys.is_internal_timer(entries[i][0]):
            at.append(i)
        i = firsts.find(_PERCENT, i + 1)
    return at
