"""The event log's codec: the events one batch staged, as one value of the ``events`` CF
(storage/event_table.py reads many such values back as one Arrow table).

Every event carries the head of its message's encoded record (storage/records.py: the
fixed header, msg_id, topic and tag; whatever body bytes follow are ignored). The hot
paths already hold that record encoded — a send's timer value, a moved timer's value, a
log entry — so staging an event is two appends (``Staged``), a storm's span of
deliveries is staged by C-level ``extend``s, and a batch's events are encoded by a few
joins, never a Python loop per message (the event log may cost a send at most 10 %).
The value is columnar, so the exporter decodes thousands of events with a few numpy
operations instead of a Python loop per event: it runs beside the writer and would
otherwise take the GIL from it.

Value layout (little-endian): header ``version, n, now_ms, group bytes, topic bytes``;
``n`` kind bytes; ``n`` int32 attempts (0 = none); ``n`` group lengths (u8, 0 = none);
``n`` topic lengths (u8, 0 = the record's own topic); ``n`` u32 head lengths; then the
group, topic and head bytes. Seqs are implicit: the key is the first one.
"""

from __future__ import annotations

import enum
import struct
import sys
from array import array
from collections.abc import Sequence
from typing import Final

from storage.records import (
    CREATED_AT_OFFSET,
    FLAGS_AT,
    HEADER_SIZE,
    N_ID_AT,
    N_TAG_AT,
    N_TOPIC_AT,
    TAG_FLAG,
)

VERSION: Final = 1
HEADER = struct.Struct("<BIQII")  # version, n, now_ms, group bytes, topic bytes
# The record fields an event reads (storage/records.py: the header, msg_id <= 128,
# topic <= 127 and tag <= 128 characters of UTF-8 <= 512 bytes): every head fits.
HEAD_MAX: Final = HEADER_SIZE + 128 + 127 + 512
# Where an event's fields sit in the head: the record's own layout (storage/records.py).
ID_AT: Final = HEADER_SIZE
CREATED_AT: Final = CREATED_AT_OFFSET
__all__ = ["FLAGS_AT", "N_ID_AT", "N_TAG_AT", "N_TOPIC_AT", "TAG_FLAG"]
_LITTLE = sys.byteorder == "little"


class EventKind(enum.IntEnum):
    """What changed (pipeline.md §1); the Parquet column holds the lower-case name."""

    SCHEDULED = 1
    RESCHEDULED = 2
    CANCELLED = 3
    DELIVERED = 4
    RECEIVED = 5
    ACKED = 6
    NACKED = 7
    EXPIRED = 8  # the invisibility ran out
    DEAD = 9
    REDRIVEN = 10
    # A message a filtered group skips is no event: the group reads its tag index and
    # never visits it (pipeline.md).


KIND_NAMES: Final = ["" for _ in range(max(EventKind) + 1)]
for _kind in EventKind:
    KIND_NAMES[_kind] = _kind.name.lower()

# The event log's columns (pipeline.md §1), declared once as (name, type, nullable):
# storage/event_table.py makes the Arrow schema of them, pipeline/events.py the Spark
# schema, and the bench's and tests' hand-made segments take that Arrow schema.
COLUMNS: Final = (
    ("seq", "int64", False),
    ("event_time_ms", "int64", False),
    ("kind", "string", False),
    ("topic", "string", False),
    ("msg_id", "string", False),
    ("group", "string", True),
    ("attempt", "int32", True),
    ("deliver_at_ms", "int64", True),
    ("created_at_ms", "int64", True),
    ("tag", "string", True),
)
# A sealed segment's columns: the events' and, last, the data dir's partition they are of
# (app/cluster/; 0 in a data dir of one partition), so (partition, seq) names an event
# across a partitioned data dir's ``p<k>/events/``. A segment sealed before the column
# existed has none: its events are partition 0's.
PARTITION_COLUMN: Final = ("partition", "int32", False)
SEGMENT_COLUMNS: Final = (*COLUMNS, PARTITION_COLUMN)


class Staged:
    """The events one batch staged, as the columns ``encode`` writes: a record head and a
    kind byte each, and the rare group event's extras aside (index, attempt, group,
    topic), so staging a send's event is two appends and encoding a batch's thousand is a
    few C-level joins: the send paths' budget for the event log is small."""

    __slots__ = ("extras", "heads", "kinds")

    def __init__(self) -> None:
        self.heads: list[bytes] = []  # the head of each event's encoded record
        self.kinds = bytearray()
        # Runs of group events: first index, the attempts (one each), group, topic.
        self.extras: list[tuple[int, array[int], bytes, bytes]] = []

    def __len__(self) -> int:
        return len(self.heads)

    def add(self, kind: int, record: bytes) -> None:
        """An event about the message whose encoded record is ``record``."""
        self.heads.append(record if len(record) <= HEAD_MAX else record[:HEAD_MAX])
        self.kinds.append(kind)

    def add_group(self, kind: int, record: bytes, attempt: int, group: bytes, topic: bytes) -> None:
        """A group event (attempt 0 = none), or one naming a topic not the record's."""
        self.extras.append((len(self.heads), array("i", (attempt,)), group, topic))
        self.add(kind, record)

    def add_group_many(
        self,
        kind: int,
        records: Sequence[bytes],
        attempts: Sequence[int],
        group: bytes,
        topic: bytes,
    ) -> None:
        """``add_group`` of each record with its attempt (a receive's or an ack's lot)."""
        at = len(self.heads)
        self.extras.append((at, array("i", attempts), group, topic))
        self.add_many(kind, records)

    def add_many(self, kind: int, values: Sequence[bytes]) -> None:
        """One event per encoded record (a storm's moved timers, a receive's lot): each
        record's head only, up to its tag. Whole 190-byte values (body included) wrote
        twice the bytes the event needs into every storm's batches (in process: the commit
        +0.4 µs a timer), and made the consumer path's events half its cost."""
        self.add_each(bytes((kind,)) * len(values), values)

    def add_each(self, kinds: bytes | bytearray, values: Sequence[bytes]) -> None:
        """``add_many`` with a kind per record (a batch send's messages due later and due
        now, in its order)."""
        # Inlined, not a function per value (that was a fifth of the move's staging); the
        # tag's length is two bytes at N_TAG_AT.
        self.heads.extend(
            [
                v[: ID_AT + v[N_ID_AT] + v[N_TOPIC_AT] + (v[N_TAG_AT] << 8 | v[N_TAG_AT + 1])]
                for v in values
            ]
        )
        self.kinds.extend(kinds)

    def mark(self) -> tuple[int, int]:
        return len(self.heads), len(self.extras)

    def undo(self, mark: tuple[int, int]) -> None:
        """Forget what was staged since ``mark`` (a rolled-back op's events)."""
        heads, extras = mark
        del self.heads[heads:], self.kinds[heads:], self.extras[extras:]

    def encode(self, now_ms: int) -> bytes:
        """The staged events (at least one) as one value of the events CF."""
        n, heads = len(self.heads), self.heads
        attempts, glens, tlens, groups, topics = _extras(n, self.extras)
        return b"".join(
            (
                HEADER.pack(VERSION, n, now_ms, len(groups), len(topics)),
                self.kinds,
                attempts,
                glens,
                tlens,
                _little("I", map(len, heads)),
                groups,
                topics,
                *heads,
            )
        )


def _extras(
    n: int, extras: list[tuple[int, array[int], bytes, bytes]]
) -> tuple[bytes, bytes, bytes, bytes, bytes]:
    """The attempt, group length and topic length columns (zeros but for ``extras``), and
    the group and topic bytes: a slice assignment per run, not a step per event."""
    if not extras:
        return bytes(4 * n), bytes(n), bytes(n), b"", b""
    if len(extras) == 1 and extras[0][0] == 0 and len(extras[0][1]) == n:
        # One run of every event (a receive's or an ack's lot): its columns as they are.
        _, run, group, topic = extras[0]
        if not _LITTLE:
            run = array("i", run)
            run.byteswap()
        glen, tlen = bytes((len(group),)), bytes((len(topic),))
        return run.tobytes(), glen * n, tlen * n, group * n, topic * n
    attempts = array("i", bytes(4 * n))
    glens, tlens = bytearray(n), bytearray(n)
    groups, topics = [], []
    for at, run, group, topic in extras:
        end, k = at + len(run), len(run)
        attempts[at:end] = run
        glens[at:end], tlens[at:end] = bytes((len(group),)) * k, bytes((len(topic),)) * k
        groups.append(group * k)
        topics.append(topic * k)
    if not _LITTLE:
        attempts.byteswap()
    return attempts.tobytes(), bytes(glens), bytes(tlens), b"".join(groups), b"".join(topics)


def _little(code: str, values: object) -> bytes:
    arr = array(code, values)  # type: ignore[call-overload]
    if not _LITTLE:
        arr.byteswap()
    return bytes(arr.tobytes())


def count_and_time(value: bytes) -> tuple[int, int]:
    """How many events a value of the events CF holds, and when they were committed."""
    _, n, now_ms, _, _ = HEADER.unpack_from(value)
    return n, now_ms
