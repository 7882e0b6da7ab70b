"""Value encodings.

Why fixed ``struct`` headers and not JSON / msgpack: a record is written once per send and
read once per delivery, on the single writer thread, so its cost is on the hot path. A
packed header is one C call each way, takes 27 bytes instead of ~120 for the same fields
in JSON, and keeps the body as raw bytes (no escaping of a 4 MiB body, no base64 inflation
on disk). Only the free-form ``properties`` map is JSON (orjson), and only when present.
"""

from __future__ import annotations

import enum
import functools
import struct
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

import orjson

from storage.errors import CorruptRecordError


class BodyEncoding(enum.IntEnum):
    UTF8 = 0
    BASE64 = 1


# deliver_at, created_at, delivered_at, encoding, len(msg_id), len(topic), len(tag), len(props)
_MESSAGE = struct.Struct(">QQQBBBHI")
TAG_FLAG = 0x80  # in the encoding byte: the record has a tag (possibly empty)
CREATED_AT_OFFSET = 8  # where created_at sits in an encoded record
DELIVERED_AT_SLICE = slice(16, 24)  # where delivered_at sits, to stamp it without decoding
NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})

# Records are NamedTuples: built and read once per message on the writer thread, where a
# tuple costs a fraction of a frozen dataclass.


class MessageRecord(NamedTuple):
    """A message as stored in a timer value and, once delivered, in a topic log."""

    topic: str
    msg_id: str
    deliver_at_ms: int
    created_at_ms: int
    body: bytes
    body_encoding: BodyEncoding = BodyEncoding.UTF8
    tag: str | None = None
    properties: Mapping[str, str] = NO_PROPERTIES
    delivered_at_ms: int = 0

    def delivered(self, at_ms: int) -> MessageRecord:
        return self._replace(delivered_at_ms=at_ms)


def encode_message(rec: MessageRecord) -> bytes:
    msg_id = rec.msg_id.encode()
    topic = rec.topic.encode()
    tag = rec.tag.encode() if rec.tag is not None else b""
    props = orjson.dumps(dict(rec.properties)) if rec.properties else b""
    header = _MESSAGE.pack(
        rec.deliver_at_ms,
        rec.created_at_ms,
        rec.delivered_at_ms,
        rec.body_encoding | (TAG_FLAG if rec.tag is not None else 0),
        len(msg_id),
        len(topic),
        len(tag),
        len(props),
    )
    return b"".join((header, msg_id, topic, tag, props, rec.body))


_ENCODINGS = {encoding.value: encoding for encoding in BodyEncoding}


def decode_message(data: bytes) -> MessageRecord:
    try:
        deliver, created, delivered, flags, n_id, n_topic, n_tag, n_props = _MESSAGE.unpack_from(
            data
        )
        id_end = _MESSAGE.size + n_id
        topic_end = id_end + n_topic
        tag_end = topic_end + n_tag
        pos = tag_end + n_props  # where the body starts
        if pos > len(data):
            raise ValueError(f"record cut short: {len(data)} bytes, header says {pos}+")
        # One tuple.__new__ of the fields in place, a dict for the enum: a receive decodes
        # every message it hands out (bench figure 5), and keyword construction, the enum
        # call and a second tuple were half this function's cost.
        return tuple.__new__(
            MessageRecord,
            (
                data[id_end:topic_end].decode(),
                data[_MESSAGE.size : id_end].decode(),
                deliver,
                created,
                data[pos:],
                _ENCODINGS[flags & ~TAG_FLAG],
                data[topic_end:tag_end].decode() if flags & TAG_FLAG else None,
                orjson.loads(data[tag_end:pos]) if n_props else {},
                delivered,
            ),
        )
    except (struct.error, UnicodeDecodeError, orjson.JSONDecodeError, ValueError, KeyError) as exc:
        raise CorruptRecordError(f"undecodable message record: {exc}") from exc


class MessageState(enum.IntEnum):
    SCHEDULED = 1
    DELIVERED = 2
    CANCELLED = 3


INDEX = struct.Struct(">BQQQQ")  # state, due, created, done_at, seq (public: the move patches it)


class IndexEntry(NamedTuple):
    """The uniq-key index: where a (topic, msg_id) is and what happened to it."""

    state: MessageState
    due_ms: int
    created_at_ms: int
    done_at_ms: int = 0  # delivered_at or cancelled_at, by state
    seq: int = 0  # position in the topic log once delivered


def encode_index(e: IndexEntry) -> bytes:
    return INDEX.pack(e.state, e.due_ms, e.created_at_ms, e.done_at_ms, e.seq)


def decode_index(data: bytes) -> IndexEntry:
    try:
        state, due, created, done, seq = INDEX.unpack(data)
        return IndexEntry(MessageState(state), due, created, done, seq)
    except (struct.error, ValueError) as exc:
        raise CorruptRecordError(f"undecodable index entry: {exc}") from exc


class GroupState(enum.IntEnum):
    INFLIGHT = 1  # held by a consumer until ``deadline_ms``
    READY = 2  # visible again, waiting in the group's retry lane
    RETRYING = 3  # waiting for a retry timer
    ACKED = 4
    DEAD = 5


_INFLIGHT = struct.Struct(">BHQQQ")


class Inflight(NamedTuple):
    """What one group did with one message of the topic log (keyed by its seq)."""

    state: GroupState
    attempts: int  # deliveries to the group so far
    generation: int  # bumped on every receive and invisibility change; old receipts die
    deadline_ms: int  # end of invisibility (INFLIGHT) or next visible time (RETRYING)
    last_failure_ms: int = 0


def encode_inflight(r: Inflight) -> bytes:
    return _INFLIGHT.pack(r.state, r.attempts, r.generation, r.deadline_ms, r.last_failure_ms)


def encode_inflight_as(r: Inflight, state: GroupState) -> bytes:
    """``encode_inflight(r._replace(state=state))``, without building the tuple."""
    return _INFLIGHT.pack(state, r.attempts, r.generation, r.deadline_ms, r.last_failure_ms)


_GROUP_STATES = {state.value: state for state in GroupState}


@functools.lru_cache(maxsize=1024)
def decode_inflight(data: bytes) -> Inflight:
    """An in-flight record, as read. Cached: a receive's first holds share one value (the
    lot's: attempt 1, its generation and deadline), so an ack of the lot decodes it once,
    not a thousand times (bench figure 5); the tuple is immutable."""
    try:
        state, attempts, gen, deadline, failure = _INFLIGHT.unpack(data)
        # A dict for the Enum call and tuple.__new__ for the NamedTuple's own __new__: half
        # the cost (every ack decodes one; bench figure 5)
        return tuple.__new__(Inflight, (_GROUP_STATES[state], attempts, gen, deadline, failure))
    except (struct.error, KeyError) as exc:
        raise CorruptRecordError(f"undecodable in-flight record: {exc}") from exc


_DEAD = struct.Struct(">HQQ")


class DeadLetter(NamedTuple):
    """A dead letter's listing entry (the message itself is in the %DLQ% topic log)."""

    msg_id: str
    attempts: int
    last_failure_ms: int
    dead_at_ms: int


def encode_dead(d: DeadLetter) -> bytes:
    return _DEAD.pack(d.attempts, d.last_failure_ms, d.dead_at_ms) + d.msg_id.encode()


def decode_dead(data: bytes) -> DeadLetter:
    try:
        attempts, failure, dead_at = _DEAD.unpack_from(data)
        return DeadLetter(data[_DEAD.size :].decode(), attempts, failure, dead_at)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"undecodable dead letter: {exc}") from exc


# --- counters: three signed ints per key (storage/keys.py, *_counts_key) ------------------

_COUNTS = struct.Struct(">qqq")
Counts = tuple[int, int, int]
NO_COUNTS: Counts = (0, 0, 0)


def encode_counts(counts: Counts) -> bytes:
    return _COUNTS.pack(*counts)


def decode_counts(raw: bytes | None) -> Counts:
    if raw is None:
        return NO_COUNTS
    try:
        a, b, c = _COUNTS.unpack(raw)
    except struct.error as exc:
        raise CorruptRecordError(f"undecodable counts: {exc}") from exc
    return a, b, c


def record_msg_id(record: bytes) -> str:
    """The msg_id of an encoded record, without decoding the rest."""
    return record[_MESSAGE.size : _MESSAGE.size + record[25]].decode()


def record_tag(record: bytes) -> str | None:
    """The tag of an encoded record, without decoding the rest (a filtered receive reads
    the tag of every message it passes)."""
    if not record[24] & 0x80:
        return None
    start = _MESSAGE.size + record[25] + record[26]
    return record[start : start + int.from_bytes(record[27:29], "big")].decode()


def record_is_base64(record: bytes) -> bool:
    return record[24] & 0x7F == BodyEncoding.BASE64


def record_delivered_at(record: bytes) -> int:
    return int.from_bytes(record[DELIVERED_AT_SLICE], "big")


def stamp_delivered(record: bytes, at_ms: int) -> bytes:
    """An encoded record with delivered_at set, without decoding the rest."""
    return (
        record[: DELIVERED_AT_SLICE.start]
        + at_ms.to_bytes(8, "big")
        + record[DELIVERED_AT_SLICE.stop :]
    )
