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


def read(txn: Txn, lane: bytes, group: str, limit: int) -> list[tuple[bytes, bytes]]:
    """The next ``limit`` entries of a lane after the group's cursor; advances the cursor.

    Reads the store, not the batch: entries appended earlier in this same batch are seen
    by the next receive (the cursor never passes an entry it did not return).
    """
    if limit <= 0:
        return []
    cursor_key = keys.cursor_key(lane, group)
    raw = txn.get(CF.META, cursor_key)
    start = keys.read_u64(raw) if raw else 0
    entries = txn.store.scan(CF.LOGS, keys.log_key(lane, start), keys.prefix_end(lane), limit)
    if entries:
        txn.put(CF.META, cursor_key, keys.u64(keys.log_seq(entries[-1][0]) + 1))
    return entries


FILTER_SCAN_CHUNK = 1_024  # entries per range scan while skipping filtered messages


def read_matching(
    txn: Txn, lane: bytes, group: str, limit: int, keep: Callable[[bytes], bool], budget: int
) -> tuple[list[tuple[bytes, bytes]], bool]:
    """Like ``read``, but only entries whose value ``keep`` accepts, looking at no more than
    ``budget`` entries: one receive never holds the writer for a scan of unbounded length.
    The cursor passes every entry looked at and not kept (the group never gets it). Returns
    the entries and whether the budget ran out before ``limit`` (more may match)."""
    if limit <= 0:
        return [], False
    cursor_key = keys.cursor_key(lane, group)
    raw = txn.get(CF.META, cursor_key)
    start = keys.log_key(lane, keys.read_u64(raw) if raw else 0)
    end = keys.prefix_end(lane)
    kept: list[tuple[bytes, bytes]] = []
    last: bytes | None = None
    seen = 0
    while seen < budget:
        chunk = txn.store.scan(CF.LOGS, start, end, min(FILTER_SCAN_CHUNK, budget - seen))
        for entry in chunk:
            last = entry[0]
            if keep(entry[1]):
                kept.append(entry)
                if len(kept) == limit:
                    break
        seen += len(chunk)
        if len(kept) == limit or len(chunk) < FILTER_SCAN_CHUNK:
            break
        start = keys.successor(chunk[-1][0])
    if last is not None:
        txn.put(CF.META, cursor_key, keys.u64(keys.log_seq(last) + 1))
    return kept, len(kept) < limit and seen >= budget
