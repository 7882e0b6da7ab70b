"""Lanes: append-only logs with a seq counter, read by groups from their own cursor.

A topic's log is one lane; each group's retry lane for a topic is another (storage/keys.py).
"""

from __future__ import annotations

from collections.abc import Callable

from storage import keys
from storage.store import CF
from storage.txn import Txn


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
    take: Callable[[list[bytes]], int] | None = None,
    *,
    join: bool = False,
) -> list[tuple[bytes, bytes]]:
    """The next ``limit`` entries of a lane after the group's cursor; advances the cursor.
    ``join``: make the cursor at the group's first read, even of nothing (a topic's
    groups are the cursors on its log: GET /v1/topics/{topic}/groups).

    Entries deleted earlier in this batch (by retention) are skipped; entries appended
    earlier in this same batch are read too, after the stored ones (a long poll served in
    the batch of the move that woke it: Writer's serve_waiting). ``take(values)``: how
    many of them, from the first, to return (a reply's byte budget).
    """
    if limit <= 0:
        return []
    cursor_key = keys.cursor_key(lane, group)
    raw = txn.get(CF.META, cursor_key)
    start = keys.read_u64(raw) if raw else 0
    end = txn.lane_end(lane)
    # Nothing after the cursor: a point read, not a scan (a long poll's usual look, and
    # most retry lanes: ~4 µs, not ~13).
    entries: list[tuple[bytes, bytes]] = []
    if start < end:
        stored_end = _stored_end(txn, lane)
        if start < stored_end:
            entries = txn.scan(CF.LOGS, keys.log_key(lane, start), keys.prefix_end(lane), limit)
        if len(entries) < limit and end > stored_end:
            entries += _appended(txn, lane, max(start, stored_end), end, limit - len(entries))
    if take is not None:
        taken = take([value for _, value in entries])
        if taken < len(entries):
            entries = entries[:taken]
    if entries:
        txn.put(CF.META, cursor_key, keys.u64(keys.log_seq(entries[-1][0]) + 1))
    elif raw is None and join:
        txn.put(CF.META, cursor_key, keys.u64(0))
    return entries


def _stored_end(txn: Txn, lane: bytes) -> int:
    """The lane's next seq as the store has it: where this batch's appends begin."""
    if lane not in txn.lane_next:
        return txn.lane_end(lane)
    raw = txn.get(CF.META, keys.next_seq_key(lane))
    return keys.read_u64(raw) if raw else 0


def _appended(txn: Txn, lane: bytes, start: int, end: int, limit: int) -> list[tuple[bytes, bytes]]:
    """Entries this batch appended at seqs ``[start, end)``, at most ``limit``, in seq order
    (those it deleted again skipped): staged values, no store read."""
    out = []
    for seq in range(start, end):
        key = keys.log_key(lane, seq)
        value = txn.get(CF.LOGS, key)
        if value is not None:
            out.append((key, value))
            if len(out) >= limit:
                break
    return out
