"""Producer-side ops (run on the writer thread): send, cancel, deliver, and the move of due
timers into topic logs. Plus the read-only status lookup (runs anywhere)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from storage import keys
from storage.records import (
    IndexEntry,
    MessageRecord,
    MessageState,
    TimerKind,
    decode_index,
    decode_message,
    encode_index,
    encode_message,
    timer_kind,
    timer_value,
)
from storage.store import CF, RocksStore
from workers import consume, lanes
from workers.errors import MessageConflict, MessageNotFound
from workers.txn import Txn


@dataclass(frozen=True, slots=True)
class SendOutcome:
    created: bool  # False: the (topic, msg_id) existed; this is the first send's record
    topic: str
    msg_id: str
    state: MessageState
    deliver_at_ms: int
    created_at_ms: int


def send(txn: Txn, rec: MessageRecord) -> SendOutcome:
    """Schedule one message; idempotent on (topic, msg_id); a cancelled id stays dead."""
    index_key = keys.message_key(rec.topic, rec.msg_id)
    raw = txn.get(CF.MESSAGES, index_key)
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
    rec = replace(rec, created_at_ms=txn.now_ms)
    txn.sync = True
    if rec.deliver_at_ms <= txn.now_ms:
        # Already due: straight into the topic log, never a timer key. This is also what
        # makes the deliverer's range delete safe (see Writer.scan_horizon).
        deliver(txn, rec)
        state = MessageState.DELIVERED
    else:
        timer = keys.message_timer_key(rec.deliver_at_ms, rec.topic, rec.msg_id)
        txn.put(CF.TIMERS, timer, timer_value(TimerKind.MESSAGE, encode_message(rec)))
        entry = IndexEntry(MessageState.SCHEDULED, rec.deliver_at_ms, rec.created_at_ms)
        txn.put(CF.MESSAGES, index_key, encode_index(entry))
        txn.add_pending(1)
        txn.schedule_hint(rec.deliver_at_ms)
        state = MessageState.SCHEDULED
    return SendOutcome(True, rec.topic, rec.msg_id, state, rec.deliver_at_ms, rec.created_at_ms)


def deliver(txn: Txn, rec: MessageRecord) -> int:
    """Append a due message to its topic log and mark it delivered; returns its seq."""
    now = txn.now_ms
    seq = lanes.append(txn, keys.topic_lane(rec.topic), encode_message(rec.delivered(now)))
    entry = IndexEntry(MessageState.DELIVERED, rec.deliver_at_ms, rec.created_at_ms, now, seq)
    txn.put(CF.MESSAGES, keys.message_key(rec.topic, rec.msg_id), encode_index(entry))
    txn.lateness_ms.append(max(0, now - rec.deliver_at_ms))
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
    done = replace(entry, state=MessageState.CANCELLED, done_at_ms=txn.now_ms)
    txn.put(CF.MESSAGES, index_key, encode_index(done))
    txn.add_pending(-1)
    txn.sync = True
    return CancelOutcome(topic, msg_id, txn.now_ms)


def move_due(txn: Txn, entries: Sequence[tuple[bytes, bytes]]) -> int:
    """Fire a contiguous span of due timer keys, as scanned, in one batch (invariant 2).

    Messages go to their topic log unless the index says they were cancelled meanwhile
    (the scanner may have picked them up before the cancel). The span is removed with one
    range delete: it holds exactly the scanned keys (Writer.scan_horizon), and the
    watermark written beside it lets a restart seek past the reclaimed range.
    """
    if not entries:
        return 0
    decoded = [keys.decode_timer_key(k) for k, _ in entries]
    kinds = [timer_kind(v) for _, v in entries]
    index_keys = [
        keys.message_key(t.target, t.ident.decode())
        for t, kind in zip(decoded, kinds, strict=True)
        if kind is TimerKind.MESSAGE
    ]
    index = iter(txn.get_many(CF.MESSAGES, index_keys))
    moved = 0
    for (_, value), timer, kind in zip(entries, decoded, kinds, strict=True):
        if kind is TimerKind.INVISIBLE:
            consume.expire(txn, keys.decode_invisible(timer))
            continue
        raw = next(index)
        if raw is None or decode_index(raw).state is not MessageState.SCHEDULED:
            continue  # cancelled after the scan: the tombstone wins
        deliver(txn, decode_message(value[1:]))
        txn.add_pending(-1)
        moved += 1
    end = keys.successor(entries[-1][0])
    txn.delete_range(CF.TIMERS, entries[0][0], end)
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
