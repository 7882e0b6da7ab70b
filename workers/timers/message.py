"""Timer kind: a scheduled message. Key ``u64be(due) ‖ topic ‖ 0x00 ‖ msg_id`` (the index
key after the due time); value: the encoded message record. Fires into the topic log."""

from __future__ import annotations

import struct
from itertools import groupby
from operator import itemgetter

from storage import keys
from storage.events import EventKind
from storage.records import (
    CREATED_AT_OFFSET,
    DELIVERED_AT_SLICE,
    FLAGS_AT,
    INDEX,
    TAG_FLAG,
    MessageRecord,
    MessageState,
    decode_message,
    encode_message,
)
from storage.store import CF
from workers import events, tagfilter
from workers.timers.kind import Span

_VALUE = itemgetter(1)
# Plain ints for the storm loop: an Enum member lookup there cost a tenth of the move.
_SCHEDULED = int(MessageState.SCHEDULED)
_DELIVERED = int(MessageState.DELIVERED)
_U64 = struct.Struct(">Q")  # keys.u64 / read_u64 without the call around them
_PACK, _READ = _U64.pack, _U64.unpack_from
_INDEX = INDEX.pack
_STAMP_AT, _STAMP_END = DELIVERED_AT_SLICE.start, DELIVERED_AT_SLICE.stop


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
    place, the index entry is packed afresh; nothing is decoded into objects, and the
    writes are staged a run at a time (a call per key was a third of a storm's move).
    """
    entries = span.entries
    run = entries if stop - start == len(entries) else entries[start:stop]
    txn = span.txn
    if span.recheck:
        # The index key of a message timer is the key minus its 8-byte due prefix.
        # Cancelled (the tombstone wins) or rescheduled (the key's due is not the index's
        # any more: the new key delivers it) after the scan: skipped.
        index_raw = txn.get_many(CF.MESSAGES, [k[8:] for k, _ in run])
        run = [
            entry
            for entry, raw in zip(run, index_raw, strict=True)
            if raw is not None and raw[0] == _SCHEDULED and raw[1:9] == entry[0][:8]
        ]
        if not run:
            return
    now = txn.now_ms
    stamp = _PACK(now)
    lateness = txn.lateness_ms
    logs: list[tuple[bytes, bytes]] = []
    index: list[tuple[bytes, bytes]] = []
    for lane, group in groupby(run, _lane):  # keys of one due time sort by topic
        lane_run = list(group)
        n = len(lane_run)
        seq = txn.claim_seq(lane, n)
        topic = lane[:-1].decode()
        for key, value in lane_run:
            due = _READ(key)[0]
            created = _READ(value, CREATED_AT_OFFSET)[0]
            stamped = value[:_STAMP_AT] + stamp + value[_STAMP_END:]
            logs.append((lane + _PACK(seq), stamped))
            index.append((key[8:], _INDEX(_DELIVERED, due, created, now, seq)))
            if value[FLAGS_AT] & TAG_FLAG:
                tagfilter.index(txn, topic, stamped, seq)
            since = due if due > created else created  # as messages.deliver: max(due, arrival)
            lateness.append(now - since if now > since else 0)
            seq += 1
        txn.woken_topics.add(topic)
        txn.count_topic(topic, scheduled=-n, delivered=n)  # pending falls with scheduled
    txn.put_many(CF.LOGS, logs)
    txn.put_many(CF.MESSAGES, index)
    # One event per delivered message, without a Python loop (storage/events.py).
    events.emit_many(txn, EventKind.DELIVERED, list(map(_VALUE, run)))
    span.moved += len(run)


def _lane(entry: tuple[bytes, bytes]) -> bytes:
    """A message timer's topic log: ``topic ‖ 0x00``, cut from its key."""
    key = entry[0]
    return key[8 : key.index(0, 8) + 1]
