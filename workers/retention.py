"""Retention (api.md: delivered messages stay in the topic log for a configurable time,
then the sweeper reclaims them; messages a group still holds are kept).

Each op runs on the writer and reclaims the oldest part of one lane:
- a topic log (and a ``%DLQ%`` log): the prefix of entries delivered before the cutoff, up
  to the first one a group still holds (in flight, backing off, or waiting to be
  received again), with their index entries (the msg_id may then be used again) and the
  groups' records of them;
- a retry lane: the entries its group has already read.
"""

from __future__ import annotations

from storage import keys
from storage.records import (
    INDEX,
    GroupState,
    MessageState,
    decode_inflight,
    record_delivered_at,
    record_msg_id,
)
from storage.store import CF, RocksStore
from workers.txn import Txn

RETENTION_BATCH = 1_000  # log entries reclaimed per op: bounds one commit
_HELD = (GroupState.INFLIGHT, GroupState.RETRYING, GroupState.READY)


def lanes(store: RocksStore) -> list[bytes]:
    """Every lane that has ever been appended to (each has a seq counter in meta)."""
    prefix = keys.next_seq_key(b"")
    found = store.scan(CF.META, prefix, keys.prefix_end(prefix), 10**9)
    return [key[len(prefix) :] for key, _ in found]


def groups_of(txn: Txn, lane: bytes) -> list[str]:
    """The groups that read a topic log (each has a cursor on it)."""
    prefix = keys.cursor_key(lane, "")
    found = txn.store.scan(CF.META, prefix, prefix + b"\xff", 10**9)
    return [key[len(prefix) :].decode() for key, _ in found]


def sweep_lane(txn: Txn, lane: bytes, cutoff_ms: int) -> int:
    """Reclaim the oldest part of ``lane``; returns how many entries went."""
    if lane.startswith(keys.RETRY_PREFIX.encode()):
        return _sweep_read(txn, lane)
    marker = keys.swept_key(lane)
    raw = txn.get(CF.META, marker)
    start = keys.read_u64(raw) if raw else 0
    entries = txn.store.scan(
        CF.LOGS, keys.log_key(lane, start), keys.prefix_end(lane), RETENTION_BATCH
    )
    topic = lane[:-1].decode()
    groups = groups_of(txn, lane)
    end = start
    doomed: list[tuple[int, bytes]] = []
    for key, value in entries:
        seq = keys.log_seq(key)
        if record_delivered_at(value) > cutoff_ms or _held(txn, topic, groups, seq):
            break
        doomed.append((seq, value))
        end = seq + 1
    if not doomed:
        return 0
    txn.delete_range(CF.LOGS, keys.log_key(lane, start), keys.log_key(lane, end))
    for group in groups:
        begin = keys.inflight_key(topic, group, start)
        txn.delete_range(CF.INFLIGHT, begin, keys.inflight_key(topic, group, end))
    for seq, value in doomed:
        index_key = keys.message_key(topic, record_msg_id(value))
        entry = txn.get(CF.MESSAGES, index_key)
        if entry is not None and _is_delivered_at(entry, seq):
            txn.delete(CF.MESSAGES, index_key)
    txn.put(CF.META, marker, keys.u64(end))
    return len(doomed)


def _is_delivered_at(index_entry: bytes, seq: int) -> bool:
    state, _, _, _, at_seq = INDEX.unpack(index_entry)
    return bool(state == MessageState.DELIVERED and at_seq == seq)


def _held(txn: Txn, topic: str, groups: list[str], seq: int) -> bool:
    for group in groups:
        raw = txn.get(CF.INFLIGHT, keys.inflight_key(topic, group, seq))
        if raw is not None and decode_inflight(raw).state in _HELD:
            return True
    return False


def _sweep_read(txn: Txn, lane: bytes) -> int:
    """A retry lane is read by one group: what it has read can go."""
    group = lane[len(keys.RETRY_PREFIX) : lane.index(keys.SEP)].decode()
    raw = txn.get(CF.META, keys.cursor_key(lane, group))
    cursor = keys.read_u64(raw) if raw else 0
    marker = keys.swept_key(lane)
    done = txn.get(CF.META, marker)
    start = keys.read_u64(done) if done else 0
    if cursor <= start:
        return 0
    txn.delete_range(CF.LOGS, keys.log_key(lane, start), keys.log_key(lane, cursor))
    txn.put(CF.META, marker, keys.u64(cursor))
    return cursor - start
