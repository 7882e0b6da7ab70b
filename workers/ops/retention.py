"""Retention: by time, per message, as RocketMQ and Kafka do (api.md, Edges).

A delivered message stays in its topic log for ``retention_ms`` from its delivery, then
goes, whether or not every group consumed it; nothing a group does stops the sweep. At the
end of a message's retention, per group that reads the topic:

- never received, or waiting for a retry (visible again, or backing off): gone for that
  group, counted as lost (Swept.lost; the sweeper logs it once per group);
- acknowledged: its record goes;
- in flight: the attempt under way finishes. An ack answers ``acked``; if the attempt
  fails instead (nack, or its invisibility runs out), the message is gone for the group,
  not retried (consume.py, ``_fail``);
- a dead letter: it stays a dead letter for ``dlq_retention_ms`` from ``dead_at_ms``:
  listed, receivable from ``%DLQ%{group}`` and redrivable until then, none of the three
  after (one op ends all three). A redrive after the message's own retention gives it one
  more attempt.

While a group holds a message past its retention (in flight, or a dead letter) its log
entry and its status stay, and its msg_id cannot be used again; a ``held`` key in meta
lists it, and each sweep reclaims it once nobody holds it. Then the msg_id may be reused.
Cancel tombstones go ``retention_ms`` after the cancel. A lane with nothing left loses its
meta keys too (seq counter, sweep marker, cursors), and a topic with nothing left its
counts (forget_topic_if_idle): nothing grows without bound.

Every op here runs on the writer, deleting key by key through the Txn, so the ops after
it in the same batch (a receive) see what it did (issue 10.3).
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from storage import keys
from storage.records import (
    INDEX,
    NO_COUNTS,
    GroupState,
    MessageState,
    decode_index,
    decode_inflight,
    decode_message,
    record_delivered_at,
    record_msg_id,
)
from storage.store import CF, RocksStore
from storage.txn import Txn
from workers.rules import tagfilter

RETENTION_BATCH = 1_000  # log entries (or tombstones) reclaimed per op: bounds one commit
_RETRY = keys.RETRY_PREFIX.encode()
_DLQ = keys.DLQ_PREFIX.encode()
_WAITING = (GroupState.READY, GroupState.RETRYING)
_TAG_COUNTERS = keys.next_seq_key(keys.TAG_PREFIX.encode())


class Swept(NamedTuple):
    passed: int  # log entries past retention that this op dealt with
    lost: Counter[str]  # per group: messages it had not consumed within retention


def lanes(store: RocksStore) -> list[bytes]:
    """Every lane in use (each has a seq counter in meta; a tag's counter is not a lane:
    tagfilter.index)."""
    prefix = keys.next_seq_key(b"")
    found = store.scan(CF.META, prefix, keys.prefix_end(prefix), 10**9)
    return [key[len(prefix) :] for key, _ in found if not key.startswith(_TAG_COUNTERS)]


def _groups(txn: Txn, lane: bytes) -> dict[str, int]:
    """The groups that read a lane (each has a cursor on it), with their cursors."""
    prefix = keys.cursor_key(lane, "")
    found = txn.scan(CF.META, prefix, prefix + b"\xff", 10**9, new=True)
    return {key[len(prefix) :].decode(): keys.read_u64(value) for key, value in found}


def _u64_at(txn: Txn, key: bytes) -> int:
    raw = txn.get(CF.META, key)
    return keys.read_u64(raw) if raw else 0


def sweep_lane(txn: Txn, lane: bytes, cutoff_ms: int, dead_cutoff_ms: int) -> Swept:
    """Deal with the next entries of ``lane`` delivered at or before the cutoff (for a
    ``%DLQ%`` lane: gone dead at or before ``dead_cutoff_ms``)."""
    if lane.startswith(_RETRY):
        return Swept(_sweep_read(txn, lane), Counter())
    dlq = lane.startswith(_DLQ)
    cutoff = dead_cutoff_ms if dlq else cutoff_ms
    marker = keys.swept_key(lane)
    start = _u64_at(txn, marker)
    entries = txn.scan(CF.LOGS, keys.log_key(lane, start), keys.prefix_end(lane), RETENTION_BATCH)
    topic = lane[:-1].decode()
    groups = _groups(txn, lane)
    lost: Counter[str] = Counter()
    end = start
    for key, value in entries:
        if record_delivered_at(value) > cutoff:
            break
        seq = keys.log_seq(key)
        end = seq + 1
        if dlq:
            _end_dead_letter(txn, lane, value)
        held = False
        for group, cursor in groups.items():
            state = _release(txn, topic, group, seq, ending=True)
            if state in _WAITING or (state is None and cursor <= seq):
                lost[group] += 1
            held = held or state in (GroupState.INFLIGHT, GroupState.DEAD)
        if held:
            txn.put(CF.META, keys.held_key(lane, seq), b"")
        else:
            _drop(txn, lane, topic, seq, value)
    if end == start:
        _forget_if_empty(txn, lane, start, groups)
        return Swept(0, lost)
    txn.put(CF.META, marker, keys.u64(end))
    for group, cursor in groups.items():
        if cursor < end:  # what it had not read is gone: it reads on from here
            txn.put(CF.META, keys.cursor_key(lane, group), keys.u64(end))
    return Swept(end - start, lost)


def sweep_held(txn: Txn, lane: bytes) -> int:
    """Reclaim the entries past retention that nobody holds any more; returns how many."""
    prefix = keys.held_prefix(lane)
    found = txn.scan(CF.META, prefix, keys.prefix_end(prefix + b"\x00"), RETENTION_BATCH, new=True)
    topic = lane[:-1].decode()
    groups = _groups(txn, lane)
    gone = 0
    for key, _ in found:
        seq = keys.read_u64(key, len(prefix))
        states = [_release(txn, topic, group, seq, ending=False) for group in groups]
        if any(state is not None for state in states):
            continue
        value = txn.get(CF.LOGS, keys.log_key(lane, seq))
        if value is not None:
            _drop(txn, lane, topic, seq, value)
        txn.delete(CF.META, key)
        gone += 1
    return gone


def _release(txn: Txn, topic: str, group: str, seq: int, *, ending: bool) -> GroupState | None:
    """What ``group`` still has of message ``seq``: None once nothing. Acked records go;
    at the end of retention (``ending``) so do the retries it was waiting for."""
    slot = keys.inflight_key(topic, group, seq)
    raw = txn.get(CF.INFLIGHT, slot)
    if raw is None:
        return None
    state = decode_inflight(raw).state
    if state is GroupState.ACKED:
        txn.delete(CF.INFLIGHT, slot)
        return None
    if ending and state in _WAITING:
        txn.delete(CF.INFLIGHT, slot)  # its retry timer finds no record: harmless
        if state is GroupState.RETRYING:
            txn.count_group(topic, group, retrying=-1)
    return state


def _drop(txn: Txn, lane: bytes, topic: str, seq: int, value: bytes) -> None:
    """The log entry and, if it still points here, the msg_id's index entry."""
    txn.delete(CF.LOGS, keys.log_key(lane, seq))
    tagfilter.unindex(txn, topic, value, seq)
    index_key = keys.message_key(topic, record_msg_id(value))
    entry = txn.get(CF.MESSAGES, index_key)
    if entry is not None and _is_delivered_at(entry, seq):
        txn.delete(CF.MESSAGES, index_key)


def _is_delivered_at(index_entry: bytes, seq: int) -> bool:
    state, _, _, _, at_seq = INDEX.unpack(index_entry)
    return bool(state == MessageState.DELIVERED and at_seq == seq)


def _end_dead_letter(txn: Txn, lane: bytes, value: bytes) -> None:
    """A dead letter's retention ended: its listing and its group's record of it go with
    its %DLQ% entry, in this one op, so that list, receive, status and redrive agree."""
    group = lane[len(_DLQ) : -1].decode()
    record = decode_message(value)
    seq = dead_seq(txn, group, record.topic, record.msg_id, record.delivered_at_ms)
    if seq is None:
        return  # redriven since (or its record already gone)
    txn.delete(CF.INFLIGHT, keys.inflight_key(record.topic, group, seq))
    txn.delete(CF.DEAD, keys.dead_key(record.topic, group, record.delivered_at_ms, seq))
    txn.count_group(record.topic, group, dead=-1)


def dead_seq(txn: Txn, group: str, topic: str, msg_id: str, dead_at_ms: int) -> int | None:
    """The source seq of the dead letter ``msg_id`` of ``group`` from ``topic`` that went
    dead at ``dead_at_ms``, if it is still that dead letter (not redriven since)."""
    raw = txn.get(CF.MESSAGES, keys.message_key(topic, msg_id))
    if raw is None:
        return None
    entry = decode_index(raw)
    if entry.state is not MessageState.DELIVERED:
        return None
    held = txn.get(CF.INFLIGHT, keys.inflight_key(topic, group, entry.seq))
    if held is None:
        return None
    state = decode_inflight(held)
    if state.state is not GroupState.DEAD or state.deadline_ms != dead_at_ms:
        return None
    return entry.seq


def _forget_if_empty(txn: Txn, lane: bytes, swept: int, groups: dict[str, int]) -> None:
    """A lane whose every entry went (none held) loses its meta keys; it starts afresh:
    its seq counter, sweep marker and cursors, and what names positions in it (the
    groups' filter histories). Its topic, if nothing else is left of it, goes too."""
    if swept == 0 or txn.lane_end(lane) != swept:
        return
    prefix = keys.held_prefix(lane)
    if txn.has_any(CF.META, prefix, keys.prefix_end(prefix + b"\x00")):
        return
    txn.delete(CF.META, keys.next_seq_key(lane))
    txn.delete(CF.META, keys.swept_key(lane))
    topic = lane[:-1].decode()
    for group in groups:
        txn.delete(CF.META, keys.cursor_key(lane, group))
        _forget_retry_lane(txn, topic, group)
    for prefix in (keys.filter_history_key(topic, ""), tagfilter.counters_prefix(topic)):
        for key, _ in txn.scan(CF.META, prefix, keys.prefix_end(prefix), 10**9, new=True):
            txn.delete(CF.META, key)
    forget_topic_if_idle(txn, topic)


def _forget_retry_lane(txn: Txn, topic: str, group: str) -> None:
    """The group's retry lane for a topic whose log is forgotten: what is left in it was
    never read again (the group went away), its messages are gone (a ready or retrying
    record ends with its retention), and its refs name seqs the log hands out afresh."""
    lane = keys.retry_lane(topic, group)
    if txn.lane_end(lane) == 0:
        return
    txn.delete_range(CF.LOGS, keys.log_key(lane, 0), keys.prefix_end(lane))  # nobody reads it
    for key in (keys.next_seq_key(lane), keys.swept_key(lane), keys.cursor_key(lane, group)):
        txn.delete(CF.META, key)


def forget_topic_if_idle(txn: Txn, topic: str) -> bool:
    """A topic with nothing left (no log, no message scheduled, delivered or cancelled
    that is not reclaimed, no recurring schedule) loses its counts, and its groups theirs
    (all zero by then): it is no longer listed (GET /v1/topics, /metrics, the console),
    however many topics came and went. Group settings stay: they are the client's. Its
    ``delivered`` and ``cancelled`` start again from zero if it is used again."""
    lane = keys.topic_lane(topic)
    schedules = keys.schedule_prefix(topic)
    if (
        txn.lane_end(lane) != 0
        or txn.has_any(CF.MESSAGES, lane, keys.prefix_end(lane))
        or txn.has_any(CF.META, schedules, keys.prefix_end(schedules))
        or txn.counted(keys.topic_counts_key(topic))[0] != 0  # scheduled
    ):
        return False
    txn.drop_counts(keys.topic_counts_key(topic))
    groups = keys.group_counts_prefix(topic)
    for key, _ in txn.scan(CF.META, groups, keys.prefix_end(groups), 10**9, new=True):
        if txn.counted(key) == NO_COUNTS:
            txn.drop_counts(key)
    return True


def _sweep_read(txn: Txn, lane: bytes) -> int:
    """A retry lane is read by one group: what it has read can go (and, once it has read
    everything, the lane's meta keys)."""
    group = lane[len(_RETRY) : lane.index(keys.SEP)].decode()
    cursor = _u64_at(txn, keys.cursor_key(lane, group))
    marker = keys.swept_key(lane)
    start = _u64_at(txn, marker)
    end = min(cursor, start + RETENTION_BATCH)
    if end <= start:
        return 0
    for seq in range(start, end):
        txn.delete(CF.LOGS, keys.log_key(lane, seq))
    if _u64_at(txn, keys.next_seq_key(lane)) == end:
        for key in (keys.next_seq_key(lane), marker, keys.cursor_key(lane, group)):
            txn.delete(CF.META, key)
    else:
        txn.put(CF.META, marker, keys.u64(end))
    return end - start


def sweep_tombstones(txn: Txn, cutoff_ms: int) -> int:
    """Reclaim the cancel tombstones older than the cutoff: their msg_ids may be reused."""
    start = keys.TOMBSTONES
    found = txn.scan(CF.META, start, start + keys.due_bound(cutoff_ms + 1), RETENTION_BATCH)
    topics: set[bytes] = set()
    for key, _ in found:
        index_key = key[len(start) + 8 :]
        raw = txn.get(CF.MESSAGES, index_key)
        if raw is not None and decode_index(raw).state is MessageState.CANCELLED:
            txn.delete(CF.MESSAGES, index_key)
            topics.add(index_key[: index_key.index(keys.SEP)])
        txn.delete(CF.META, key)
    for topic in sorted(topics):  # one whose messages were all cancelled: nothing is left
        forget_topic_if_idle(txn, topic.decode())
    return len(found)
