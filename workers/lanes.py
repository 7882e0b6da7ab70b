"""Lanes: append-only logs with a seq counter, read by groups from their own cursor.

A topic's log is one lane; each group's retry lane for a topic is another (storage/keys.py).
"""

from __future__ import annotations

from collections.abc import Callable

from storage import keys
from storage.store import CF
from workers.txn import Txn


def append(txn: Txn, lane: bytes, value: bytes) -> int:
    """Append ``value`` at the lane's next seq; returns the seq.

    Batch-aware: the counter is read from meta once per batch and lane, then counted in
    the Txn, which writes it back once at commit (a storm appends thousands per batch).
    """
    seq = txn.claim_seq(lane)
    txn.put(CF.LOGS, lane + keys.u64(seq), value)
    return seq


def read(
    txn: Txn,
    lane: bytes,
    group: str,
    limit: int,
    fits: Callable[[bytes], bool] | None = None,
    *,
    join: bool = False,
) -> list[tuple[bytes, bytes]]:
    """The next ``limit`` entries of a lane after the group's cursor; advances the cursor.
    ``join``: make the cursor at the group's first read, even of nothing (a topic's
    groups are the cursors on its log: GET /v1/topics/{topic}/groups).

    Entries deleted earlier in this batch (by retention) are skipped; entries appended
    earlier in this same batch are seen by the next receive (the cursor never passes an
    entry it did not return). ``fits(value)``: stop before the first entry it refuses.
    """
    if limit <= 0:
        return []
    cursor_key = keys.cursor_key(lane, group)
    raw = txn.get(CF.META, cursor_key)
    start = keys.read_u64(raw) if raw else 0
    entries = txn.scan(CF.LOGS, keys.log_key(lane, start), keys.prefix_end(lane), limit)
    if fits is not None:
        for taken, (_, value) in enumerate(entries):
            if not fits(value):
                entries = entries[:taken]
                break
    if entries:
        txn.put(CF.META, cursor_key, keys.u64(keys.log_seq(entries[-1][0]) + 1))
    elif raw is None and join:
        txn.put(CF.META, cursor_key, keys.u64(0))
    return entries


FILTER_SCAN_CHUNK = 1_024  # entries per range scan while skipping filtered messages


def read_matching(
    txn: Txn,
    lane: bytes,
    group: str,
    limit: int,
    keep: Callable[[bytes], bool],
    budget: int,
    fits: Callable[[bytes], bool] | None = None,
) -> tuple[list[tuple[bytes, bytes]], bool]:
    """Like ``read``, but only entries whose value ``keep`` accepts, looking at no more than
    ``budget`` entries: one receive never holds the writer for a scan of unbounded length.
    The cursor passes every entry looked at and not kept (the group never gets it). Returns
    the entries and whether the budget ran out before ``limit`` (more may match)."""
    if limit <= 0:
        return [], False
    cursor_key = keys.cursor_key(lane, group)
    raw = txn.get(CF.META, cursor_key)
    next_seq = keys.read_u64(raw) if raw else 0
    start, end = keys.log_key(lane, next_seq), keys.prefix_end(lane)
    kept: list[tuple[bytes, bytes]] = []
    seen, full = 0, False
    while seen < budget and not full:
        chunk = txn.scan(CF.LOGS, start, end, min(FILTER_SCAN_CHUNK, budget - seen))
        for key, value in chunk:
            if keep(value):
                if fits is not None and not fits(value):
                    full = True  # the reply is full: the cursor stays on this entry
                    break
                kept.append((key, value))
            next_seq = keys.log_seq(key) + 1
            if len(kept) == limit:
                full = True
                break
        seen += len(chunk)
        if len(chunk) < FILTER_SCAN_CHUNK:
            break
        start = keys.successor(chunk[-1][0])
    txn.put(CF.META, cursor_key, keys.u64(next_seq))  # made at the first read, as ``join``
    return kept, not full and seen >= budget
