"""Timer kind: a scheduled message. Key ``u64be(due) ‖ topic ‖ 0x00 ‖ msg_id`` (the index
key after the due time); value: the encoded message record. Fires into the topic log."""

from __future__ import annotations

from storage import keys
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
from workers import lanes
from workers.timers.kind import Span, internal

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


def fire_run(span: Span, start: int) -> int:
    """Deliver the run of message timers from ``start``: each into its topic log, its index
    entry marked delivered, unless it was cancelled or rescheduled after the scan.

    This is the storm path (millions due at once), so it works on the encoded bytes: the
    topic and msg_id are cut from the key, the record gets its delivered_at stamped in
    place, the index entry is packed afresh; nothing is decoded into objects.
    """
    entries = span.entries
    stop = start
    while stop < len(entries) and not internal(entries[stop][0]):
        stop += 1
    run = entries[start:stop]
    txn = span.txn
    # The index key of a message timer is the key minus its 8-byte due prefix.
    index_raw = iter(txn.get_many(CF.MESSAGES, [k[8:] for k, _ in run])) if span.recheck else None
    now = txn.now_ms
    lateness = txn.lateness_ms
    woken: set[bytes] = set()
    last_lane = b""
    moved = 0
    for key, value in run:
        if index_raw is not None:
            raw = next(index_raw)
            # Cancelled (the tombstone wins) or rescheduled (the key's due is not the
            # index's any more: the new key delivers it) after the scan.
            if raw is None or raw[0] != _SCHEDULED or raw[1:9] != key[:8]:
                continue
        lane = key[8 : key.index(0, 8) + 1]  # topic ‖ 0x00
        if lane != last_lane:
            woken.add(lane)
            last_lane = lane
        due = keys.read_u64(key)
        seq = lanes.append(txn, lane, stamp_delivered(value, now))
        created = keys.read_u64(value, CREATED_AT_OFFSET)
        txn.put(CF.MESSAGES, key[8:], INDEX.pack(_DELIVERED, due, created, now, seq))
        lateness.append(now - due if now > due else 0)
        moved += 1
    txn.woken_topics.update(lane[:-1].decode() for lane in woken)
    txn.add_pending(-moved)
    span.moved += moved
    return stop
