"""Timer kind: a scheduled message. Key ``u64be(due) ‖ topic ‖ 0x00 ‖ msg_id`` (the index
key after the due time); value: the encoded message record. Fires into the topic log."""

from __future__ import annotations

from operator import itemgetter

from storage import keys
from storage.events import EventKind
from storage.records import (
    CREATED_AT_OFFSET,
    INDEX,
    MessageRecord,
    MessageState,
    decode_message,
    encode_message,
    stamp_delivered,
)
from storage.store import CF
from workers import events, lanes
from workers.timers.kind import Span

_VALUE = itemgetter(1)
# Plain ints for the storm loop: an Enum member lookup there cost a tenth of the move.
_SCHEDULED = int(MessageState.SCHEDULED)
_DELIVERED = int(MessageState.DELIVERED)


def timer_key(due_ms: int, topic: str, msg_id: str) -> bytes:
    return keys.u64(due_ms) + keys.message_key(topic, msg_id)


def timer_key_of(due_ms: int, index_key: bytes) -> bytes:
    """The timer key from the message's index key (``topic ‖ 0x00 ‖ msg_id``): the same
    bytes as ``timer_key``, one concatenation instead of two encodes."""
    return keys.u64(due_ms) + index_key


def timer_value(rec: MessageRecord) -> bytes:
    return encode_message(rec)


def decode_value(value: bytes) -> MessageRecord:
    return decode_message(value)


def fire_run(span: Span, start: int, stop: int) -> None:
    """Deliver a run of message timers: each into its topic log, its index entry marked
    delivered, unless it was cancelled or rescheduled after the scan.

    This is the storm path (millions due at once), so it works on the encoded bytes: the
    topic and msg_id are cut from the key, the record gets its delivered_at stamped in
    place, the index entry is packed afresh; nothing is decoded into objects.
    """
    entries = span.entries
    run = entries if stop - start == len(entries) else entries[start:stop]
    txn = span.txn
    # The index key of a message timer is the key minus its 8-byte due prefix.
    index_raw = iter(txn.get_many(CF.MESSAGES, [k[8:] for k, _ in run])) if span.recheck else None
    now = txn.now_ms
    lateness = txn.lateness_ms
    per_lane: dict[bytes, int] = {}  # messages moved into each topic log
    last_lane = b""
    moved = in_lane = 0
    skipped: set[bytes] = set()
    for key, value in run:
        if index_raw is not None:
            raw = next(index_raw)
            # Cancelled (the tombstone wins) or rescheduled (the key's due is not the
            # index's any more: the new key delivers it) after the scan.
            if raw is None or raw[0] != _SCHEDULED or raw[1:9] != key[:8]:
                skipped.add(key)
                continue
        lane = key[8 : key.index(0, 8) + 1]  # topic ‖ 0x00
        if lane != last_lane:
            if in_lane:
                per_lane[last_lane] = per_lane.get(last_lane, 0) + in_lane
            last_lane, in_lane = lane, 0
        due = keys.read_u64(key)
        seq = lanes.append(txn, lane, stamp_delivered(value, now))
        created = keys.read_u64(value, CREATED_AT_OFFSET)
        txn.put(CF.MESSAGES, key[8:], INDEX.pack(_DELIVERED, due, created, now, seq))
        since = due if due > created else created  # as messages.deliver: max(due, arrival)
        lateness.append(now - since if now > since else 0)
        in_lane += 1
        moved += 1
    if in_lane:
        per_lane[last_lane] = per_lane.get(last_lane, 0) + in_lane
    for lane, n in per_lane.items():  # one counter update per topic, not per message
        topic = lane[:-1].decode()
        txn.woken_topics.add(topic)
        txn.count_topic(topic, scheduled=-n, delivered=n)  # pending falls with scheduled
    if moved:  # one event per delivered message, without a Python loop (storage/events.py)
        delivered = run if not skipped else [e for e in run if e[0] not in skipped]
        events.emit_many(txn, EventKind.DELIVERED, list(map(_VALUE, delivered)))
    span.moved += moved
