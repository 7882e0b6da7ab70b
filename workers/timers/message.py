"""Timer kind: a scheduled message. Key ``u64be(due) ‖ topic ‖ 0x00 ‖ msg_id`` (the index
key after the due time); value: the encoded message record. It fires into the topic log:
workers/ops/messages.py (``fire_run``)."""

from __future__ import annotations

from storage import keys
from storage.records import MessageRecord, decode_message, encode_message


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
