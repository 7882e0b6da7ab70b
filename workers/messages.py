"""Producer-side ops (run on the writer thread): send, cancel, deliver, and the move of due
timers into topic logs. Plus the read-only status lookup (runs anywhere)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from storage import keys
from storage.errors import CorruptRecordError
from storage.records import (
    CREATED_AT_OFFSET,
    INDEX,
    TIMER_PREFIXES,
    IndexEntry,
    MessageRecord,
    MessageState,
    TimerKind,
    decode_index,
    decode_message,
    encode_index,
    encode_message,
    stamp_delivered,
)
from storage.store import CF, RocksStore
from workers import consume, lanes
from workers.errors import MessageConflict, MessageNotFound
from workers.txn import Txn

log = logging.getLogger("rocktimer.deliverer")

# Spans this long go with one range delete; shorter ones with point deletes. RocksDB
# walks every range tombstone in the memtable whenever it builds an iterator: at a steady
# few thousand timers/s, one per small move made each scan cost milliseconds (bench).
RANGE_DELETE_MIN = 512

# Plain ints for the storm loop: an Enum member lookup there cost a tenth of the move.
_MESSAGE_TIMER = int(TimerKind.MESSAGE)
_MESSAGE_TIMER_PREFIX = TIMER_PREFIXES[TimerKind.MESSAGE]
_SCHEDULED = int(MessageState.SCHEDULED)
_DELIVERED = int(MessageState.DELIVERED)


class SendOutcome(NamedTuple):
    created: bool  # False: the (topic, msg_id) existed; this is the first send's record
    topic: str
    msg_id: str
    state: MessageState
    deliver_at_ms: int
    created_at_ms: int


def send(txn: Txn, rec: MessageRecord, *, fresh_id: bool = False) -> SendOutcome:
    """Schedule one message; idempotent on (topic, msg_id); a cancelled id stays dead.

    ``fresh_id``: the server made the msg_id just now (app/ids.py: unique by construction),
    so it cannot be in the index and the lookup is skipped.
    """
    index_key = keys.message_key(rec.topic, rec.msg_id)
    return _send(txn, rec, index_key, None if fresh_id else txn.get(CF.MESSAGES, index_key))


def send_many(
    txn: Txn, recs: Sequence[MessageRecord | None], fresh_ids: Sequence[bool] = ()
) -> list[SendOutcome | Exception | None]:
    """Send each record on its own (None items are skipped), with one multi-get of the index
    for the records whose msg_id the client chose (``fresh_ids[i]``: as in ``send``)."""
    fresh = list(fresh_ids) or [False] * len(recs)
    index_keys = [keys.message_key(r.topic, r.msg_id) if r else b"" for r in recs]
    looked_up = [k for k, new in zip(index_keys, fresh, strict=True) if k and not new]
    found = iter(txn.get_many(CF.MESSAGES, looked_up))
    seen: set[bytes] = set()
    out: list[SendOutcome | Exception | None] = []
    for rec, index_key, new in zip(recs, index_keys, fresh, strict=True):
        if rec is None:
            out.append(None)
            continue
        raw = None if new else next(found)
        if index_key in seen:  # the same id twice in one batch: the first one is staged
            raw = txn.get(CF.MESSAGES, index_key)
        seen.add(index_key)
        point = txn.savepoint()
        try:
            out.append(_send(txn, rec, index_key, raw))
        except Exception as exc:
            txn.rollback(point)
            out.append(exc)
    return out


def _send(txn: Txn, rec: MessageRecord, index_key: bytes, raw: bytes | None) -> SendOutcome:
    if raw is not None:
        entry = decode_index(raw)
        if entry.state is MessageState.CANCELLED:
            raise MessageConflict(
                f"message {rec.msg_id!r} in topic {rec.topic!r} was cancelled; "
                "its msg_id cannot be reused"
            )
        return SendOutcome(
            False, rec.topic, rec.msg_id, entry.state, entry.due_ms, entry.created_at_ms
        )
    if not rec.created_at_ms:
        rec = rec._replace(created_at_ms=txn.now_ms)
    txn.sync = True
    if rec.deliver_at_ms <= txn.now_ms:
        # Already due: straight into the topic log, never a timer key. This is also what
        # makes the deliverer's range delete safe (see Writer.scan_horizon).
        deliver(txn, rec)
        state = MessageState.DELIVERED
    else:
        timer = keys.timer_key_of(rec.deliver_at_ms, index_key)
        txn.put(CF.TIMERS, timer, encode_message(rec, _MESSAGE_TIMER_PREFIX))
        txn.put(
            CF.MESSAGES,
            index_key,
            INDEX.pack(_SCHEDULED, rec.deliver_at_ms, rec.created_at_ms, 0, 0),
        )
        txn.count_topic(rec.topic, scheduled=1)
        txn.schedule_hint(rec.deliver_at_ms)
        state = MessageState.SCHEDULED
    # tuple.__new__: a NamedTuple's own __new__ is a Python call, half the cost (batch path)
    return tuple.__new__(
        SendOutcome, (True, rec.topic, rec.msg_id, state, rec.deliver_at_ms, rec.created_at_ms)
    )


def deliver(txn: Txn, rec: MessageRecord) -> int:
    """Append a due message to its topic log and mark it delivered; returns its seq.

    Lateness runs from when the message could first be delivered: its deliver time, or
    its arrival if the client gave a time already past (a 1970 deliver_at is not late)."""
    now = txn.now_ms
    seq = lanes.append(txn, keys.topic_lane(rec.topic), encode_message(rec.delivered(now)))
    entry = IndexEntry(MessageState.DELIVERED, rec.deliver_at_ms, rec.created_at_ms, now, seq)
    txn.put(CF.MESSAGES, keys.message_key(rec.topic, rec.msg_id), encode_index(entry))
    txn.lateness_ms.append(max(0, now - max(rec.deliver_at_ms, rec.created_at_ms)))
    txn.count_topic(rec.topic, delivered=1)
    txn.woken_topics.add(rec.topic)
    return seq


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    topic: str
    msg_id: str
    cancelled_at_ms: int


def cancel(txn: Txn, topic: str, msg_id: str) -> CancelOutcome:
    """Tombstone the msg_id and delete its timer, in one batch (invariant 4)."""
    index_key = keys.message_key(topic, msg_id)
    raw = txn.get(CF.MESSAGES, index_key)
    if raw is None:
        raise MessageNotFound(f"no message {msg_id!r} in topic {topic!r}")
    entry = decode_index(raw)
    if entry.state is MessageState.CANCELLED:
        return CancelOutcome(topic, msg_id, entry.done_at_ms)
    if entry.state is MessageState.DELIVERED:
        raise MessageConflict(f"message {msg_id!r} in topic {topic!r} was already delivered")
    txn.delete(CF.TIMERS, keys.message_timer_key(entry.due_ms, topic, msg_id))
    done = entry._replace(state=MessageState.CANCELLED, done_at_ms=txn.now_ms)
    txn.put(CF.MESSAGES, index_key, encode_index(done))
    txn.count_topic(topic, scheduled=-1, cancelled=1)
    txn.cancels += 1
    txn.sync = True
    return CancelOutcome(topic, msg_id, txn.now_ms)


def move_due(
    txn: Txn, entries: Sequence[tuple[bytes, bytes]], cancel_mark: int | None = None
) -> int:
    """Fire a contiguous span of due timer keys, as scanned, in one batch (invariant 2).

    Messages go to their topic log unless they were cancelled after the scan picked them
    up: the index is re-read unless ``cancel_mark`` (the writer's cancel count at scan
    time) proves no cancel has committed since and none is staged in this batch. A timer
    key exists only while its index entry says scheduled, so then every entry is live.
    A long span is removed with one range delete: it holds exactly the scanned keys
    (Writer.scan_horizon); the watermark written beside it lets a restart seek past it.

    This is the storm path (millions due at once), so it works on the encoded bytes: the
    topic and msg_id are cut from the key, the record gets its delivered_at stamped in
    place, the index entry is packed afresh; nothing is decoded into objects.
    """
    if not entries:
        return 0
    # The index key of a message timer is the key minus its 8-byte due prefix.
    if cancel_mark is not None and cancel_mark == txn.cancels_committed and not txn.cancels:
        index_raw = None
    else:
        index_raw = iter(
            txn.get_many(CF.MESSAGES, [k[8:] for (k, v) in entries if v[0] == _MESSAGE_TIMER])
        )
    now = txn.now_ms
    next_seq: dict[bytes, int] = {}
    first_seq: dict[bytes, int] = {}
    lateness = txn.lateness_ms
    for key, value in entries:
        if value[0] != _MESSAGE_TIMER:
            try:
                consume.fire(txn, key, value[0])
            except CorruptRecordError as exc:  # one bad key must not stall every delivery
                log.error("skipping an undecodable timer: %s", exc)
            continue
        if index_raw is not None:
            raw = next(index_raw)
            if raw is None or raw[0] != _SCHEDULED:
                continue  # cancelled after the scan: the tombstone wins
        lane = key[8 : key.index(0, 8) + 1]  # topic ‖ 0x00
        seq = next_seq.get(lane)
        if seq is None:
            counter = txn.get(CF.META, keys.next_seq_key(lane))
            seq = keys.read_u64(counter) if counter else 0
            first_seq[lane] = seq
        due = keys.read_u64(key)
        created = keys.read_u64(value, 1 + CREATED_AT_OFFSET)
        txn.put(CF.LOGS, lane + keys.u64(seq), stamp_delivered(value[1:], now))
        txn.put(CF.MESSAGES, key[8:], INDEX.pack(_DELIVERED, due, created, now, seq))
        next_seq[lane] = seq + 1
        since = due if due > created else created  # as in deliver: from max(due, arrival)
        lateness.append(now - since if now > since else 0)
    moved = 0
    for lane, seq in next_seq.items():  # one counter update per topic, not per message
        txn.put(CF.META, keys.next_seq_key(lane), keys.u64(seq))
        topic = lane[:-1].decode()
        txn.woken_topics.add(topic)
        n = seq - first_seq[lane]
        txn.count_topic(topic, scheduled=-n, delivered=n)
        moved += n
    end = keys.successor(entries[-1][0])
    if len(entries) >= RANGE_DELETE_MIN:
        txn.delete_range(CF.TIMERS, entries[0][0], end)
    else:
        for key, _ in entries:
            txn.delete(CF.TIMERS, key)
    txn.put(CF.META, keys.WATERMARK_KEY, end)
    return moved


@dataclass(frozen=True, slots=True)
class MessageStatus:
    entry: IndexEntry
    record: MessageRecord | None  # None once cancelled (the timer is gone) or swept


def status(store: RocksStore, topic: str, msg_id: str) -> MessageStatus:
    """Read a message's state without the writer; retries if a move races the two reads."""
    index_key = keys.message_key(topic, msg_id)
    for _ in range(3):
        raw = store.get(CF.MESSAGES, index_key)
        if raw is None:
            raise MessageNotFound(f"no message {msg_id!r} in topic {topic!r}")
        entry = decode_index(raw)
        if entry.state is MessageState.CANCELLED:
            return MessageStatus(entry, None)
        if entry.state is MessageState.SCHEDULED:
            value = store.get(CF.TIMERS, keys.message_timer_key(entry.due_ms, topic, msg_id))
            if value is None:
                continue  # moved or cancelled between the reads: read the index again
            return MessageStatus(entry, decode_message(value[1:]))
        value = store.get(CF.LOGS, keys.log_key(keys.topic_lane(topic), entry.seq))
        return MessageStatus(entry, decode_message(value) if value else None)
    return MessageStatus(entry, None)
