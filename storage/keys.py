"""Binary key codec. Every key is big-endian so that byte order is the order we scan in.

Names (topics, groups) match ``^[%|a-zA-Z0-9_-]{1,127}$`` and msg ids match
``^[A-Za-z0-9._:-]{1,128}$``: neither can hold 0x00, which is therefore the separator.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from typing import NamedTuple

from storage.errors import CorruptRecordError

SEP = b"\x00"
_U64 = struct.Struct(">Q")
_U64_MAX = 2**64 - 1
MAX_DUE_MS = _U64_MAX  # the latest due time a timer key can hold

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
INVISIBLE_PREFIX = "%INVISIBLE%"
SCHEDULE_PREFIX = "%SCHEDULE%"
TAG_PREFIX = "%TAG%"
# Names no client may send to: internal timers' targets and the group lanes.
RESERVED_PREFIXES = (RETRY_PREFIX, DLQ_PREFIX, INVISIBLE_PREFIX, SCHEDULE_PREFIX, TAG_PREFIX)
# Names no client reads either (%DLQ% is readable: dead letters are received from it):
# the engine's own timers' targets and the group lanes. The one list every "is this
# internal" question reads (``is_internal``, ``is_internal_timer``).
INTERNAL_PREFIXES = (RETRY_PREFIX, INVISIBLE_PREFIX, SCHEDULE_PREFIX, TAG_PREFIX)
INTERNAL_MARK = ord("%")  # the first byte of every internal name
_INTERNAL_BYTES = tuple(prefix.encode() for prefix in INTERNAL_PREFIXES)


def is_internal(name: str) -> bool:
    """Whether ``name`` (a topic or timer target) is one of the engine's own."""
    return name.startswith(INTERNAL_PREFIXES)


def is_internal_timer(key: bytes) -> bool:
    """Whether a timers-CF key targets one of the engine's own names (else it is a
    scheduled message): read from the key's bytes, nothing decoded."""
    return key[8] == INTERNAL_MARK and key.startswith(_INTERNAL_BYTES, 8)


# u64(value): eight big-endian bytes; raises ``struct.error`` outside 0..2**64-1. The
# struct's own method, not a function around it: keys of a lot are made eight times a
# message on the consumer path.
u64: Callable[[int], bytes] = _U64.pack


def read_u64(data: bytes, offset: int = 0) -> int:
    return int(_U64.unpack_from(data, offset)[0])


def successor(key: bytes) -> bytes:
    """The smallest key greater than ``key`` (an exclusive end just past it)."""
    return key + SEP


def prefix_end(prefix: bytes) -> bytes:
    """The exclusive upper bound of every key starting with ``prefix`` (which ends in 0x00)."""
    return prefix[:-1] + b"\x01"


# --- timers: u64be(due_ms) ‖ target ‖ 0x00 ‖ ident ------------------------------------


class TimerKey(NamedTuple):
    due_ms: int
    target: str
    ident: bytes


def timer_key(due_ms: int, target: str, ident: bytes) -> bytes:
    """A timer: a message (target = topic, ident = msg_id) or an internal timer (the
    target a reserved prefix: workers/timers/ has one module per kind)."""
    return _U64.pack(due_ms) + target.encode() + SEP + ident


def decode_timer_key(key: bytes) -> TimerKey:
    try:
        sep = key.index(SEP, 8)
        return TimerKey(read_u64(key), key[8:sep].decode(), key[sep + 1 :])
    except (ValueError, struct.error) as exc:  # UnicodeDecodeError is a ValueError
        raise CorruptRecordError(f"undecodable timer key {key!r}: {exc}") from exc


def due_bound(due_ms: int) -> bytes:
    """The first timer key that can fall due at ``due_ms`` (use as an exclusive end for < due)."""
    return _U64.pack(min(due_ms, _U64_MAX))


# --- uniq-key index: topic ‖ 0x00 ‖ msg_id ----------------------------------------------


def message_key(topic: str, msg_id: str) -> bytes:
    return topic.encode() + SEP + msg_id.encode()


# --- logs: lane ‖ u64be(seq) -------------------------------------------------------------
# A lane is a prefix ending in 0x00: a topic's log is ``topic ‖ 0x00``; a group's retry lane
# for one topic is ``%RETRY%group ‖ 0x00 ‖ topic ‖ 0x00`` (only that group reads it).


def topic_lane(topic: str) -> bytes:
    return topic.encode() + SEP


def retry_lane(topic: str, group: str) -> bytes:
    return (RETRY_PREFIX + group).encode() + SEP + topic.encode() + SEP


def log_key(lane: bytes, seq: int) -> bytes:
    return lane + _U64.pack(seq)


def log_seq(key: bytes) -> int:
    return read_u64(key, len(key) - 8)


# --- in-flight (per group message state): topic ‖ 0x00 ‖ group ‖ 0x00 ‖ u64be(seq) --------


def inflight_key(topic: str, group: str, seq: int) -> bytes:
    return topic.encode() + SEP + group.encode() + SEP + _U64.pack(seq)


def inflight_prefix(topic: str, group: str) -> bytes:
    """What every in-flight key of one topic and group starts with (then ``u64(seq)``)."""
    return topic.encode() + SEP + group.encode() + SEP


# --- meta: small named records --------------------------------------------------------


def next_seq_key(lane: bytes) -> bytes:
    return b"seq" + SEP + lane


def cursor_key(lane: bytes, group: str) -> bytes:
    return b"cursor" + SEP + lane + group.encode()


def swept_key(lane: bytes) -> bytes:
    """How far retention has reclaimed a lane (the first seq not yet past it)."""
    return b"swept" + SEP + lane


def held_prefix(lane: bytes) -> bytes:
    return b"held" + SEP + lane


def held_key(lane: bytes, seq: int) -> bytes:
    """A log entry past retention that a group still holds (in flight, or a dead letter):
    retention reclaims it once nobody does."""
    return held_prefix(lane) + _U64.pack(seq)


TOMBSTONES = b"tombstone" + SEP


def tombstone_key(cancelled_ms: int, index_key: bytes) -> bytes:
    """A cancel's tombstone, in cancel-time order: retention reclaims it (ops/retention.py)."""
    return TOMBSTONES + _U64.pack(cancelled_ms) + index_key


GROUP_SETTINGS = b"group" + SEP  # every group's settings, by topic then group


def group_key(topic: str, group: str) -> bytes:
    return GROUP_SETTINGS + topic.encode() + SEP + group.encode()


def decode_group_key(key: bytes) -> tuple[str, str]:
    """(topic, group) of a group_key."""
    topic, group = key[len(GROUP_SETTINGS) :].split(SEP)
    return topic.decode(), group.decode()


def filter_history_key(topic: str, group: str) -> bytes:
    """The group's earlier tag filters, each with the cursor position where it ended."""
    return b"filters" + SEP + topic.encode() + SEP + group.encode()


# --- tag index (logs): %TAG%topic ‖ 0x00 ‖ blake2b-8(tag) ‖ u64be(seq) -> u64be(number) ---
# A topic log's entries by tag, so that a filtered group reads what matches, not all. The
# tag goes in hashed: fixed length; a collision only makes the reader look at a record
# whose tag it then checks. The value numbers the entry among the topic's entries of its
# tag, from a counter kept as a lane's seq is (next_seq_key of the tag's prefix): a
# filtered group's backlog is read from it (workers/rules/tagfilter.py).


def tag_prefix(topic: str, tag: str) -> bytes:
    return (
        (TAG_PREFIX + topic).encode() + SEP + hashlib.blake2b(tag.encode(), digest_size=8).digest()
    )


def tag_key(topic: str, tag: str, seq: int) -> bytes:
    return tag_prefix(topic, tag) + _U64.pack(seq)


TAG_KEY_END = b"\xff" * 9  # after a tag prefix: past every seq


# --- recurring schedules (meta): schedule ‖ 0x00 ‖ topic ‖ 0x00 ‖ schedule_id ------------


def schedule_prefix(topic: str) -> bytes:
    return b"schedule" + SEP + topic.encode() + SEP


def schedule_key(topic: str, schedule_id: str) -> bytes:
    return schedule_prefix(topic) + schedule_id.encode()


# --- dead letters: topic ‖ 0x00 ‖ group ‖ 0x00 ‖ u64be(dead_at_ms) ‖ u64be(seq) ------------


def dead_prefix(topic: str, group: str) -> bytes:
    return topic.encode() + SEP + group.encode() + SEP


def dead_key(topic: str, group: str, dead_at_ms: int, seq: int) -> bytes:
    return dead_prefix(topic, group) + _U64.pack(dead_at_ms) + _U64.pack(seq)


DEAD_POSITION_BYTES = 16  # u64be(dead_at_ms) ‖ u64be(seq): a letter's place in its listing


def dead_position(key: bytes) -> bytes:
    """Where a dead-letter key sits in its (topic, group) listing (a page cursor's content)."""
    return key[-DEAD_POSITION_BYTES:]


def dead_key_at(topic: str, group: str, position: bytes) -> bytes:
    return dead_prefix(topic, group) + position


def dlq_lane(group: str) -> bytes:
    """The log of topic ``%DLQ%group``: every dead letter of the group, any source topic."""
    return topic_lane(DLQ_PREFIX + group)


# --- events: u64be(first seq) -> the events one batch staged (storage/events.py) --------


def event_key(seq: int) -> bytes:
    return _U64.pack(seq)


EVENTS_NEXT_KEY = b"events-next-seq"  # meta: the seq the next event gets (never reused)


# --- counters, kept in the batch of each change (storage/records.py, Counts) -----------


TOPIC_COUNTS_PREFIX = b"topic-counts" + SEP


def topic_counts_key(topic: str) -> bytes:
    """A topic's scheduled / delivered / cancelled counts; their keys list the topics."""
    return TOPIC_COUNTS_PREFIX + topic.encode()


def group_counts_prefix(topic: str) -> bytes:
    return b"group-counts" + SEP + topic.encode() + SEP


def group_counts_key(topic: str, group: str) -> bytes:
    """A group's in-flight / retrying / dead counts on one topic; their keys list its groups."""
    return group_counts_prefix(topic) + group.encode()


WATERMARK_KEY = b"timer-watermark"  # past the last moved span of timer keys
RECEIPT_SECRET_KEY = b"receipt-secret"  # the MAC key of receipts (workers/rules/receipts.py)
PENDING_KEY = b"pending-timers"
# Cluster mode (app/cluster/replica/): the changelog seq a partition's copy holds up to, the
# epoch of the last fence it applied, and a mark that an owner wrote to it (then it may hold
# writes the changelog does not: it is rebuilt before it serves as a standby again).
CHANGELOG_SEQ_KEY = b"changelog-seq"
CHANGELOG_EPOCH_KEY = b"changelog-epoch"
OWNED_MARK_KEY = b"changelog-owned"


def trusted_watermark(watermark: bytes | None, now_ms: int) -> bytes:
    """Where a walk of the timer keys still to come may start: the watermark (the moved
    keys and their tombstones lie below it), unless it is past ``now_ms``. Then the clock
    stepped back since it was written (across a restart), keys may since have been
    written below it, and the walk starts from the first key (b"")."""
    if not watermark or read_u64(watermark) > now_ms:
        return b""
    return watermark
