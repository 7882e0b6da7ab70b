"""The event log's codec: the events one batch staged, as one value of the ``events`` CF
(storage/event_table.py reads many such values back as one Arrow table).

Every event carries the head of its message's encoded record (storage/records.py: the
fixed header, msg_id, topic and tag; whatever body bytes follow are ignored). The hot
paths already hold that record encoded — a send's timer value, a moved timer's value, a
log entry — so staging an event is a slice and one append, and a storm's span of
deliveries is staged as one ``Span`` of the scanned values and encoded by C-level
``map``s and joins, never a Python loop per message (the storm figure is the budget).
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
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Final, NamedTuple

from storage.records import TAG_FLAG

VERSION: Final = 1
HEADER = struct.Struct("<BIQII")  # version, n, now_ms, group bytes, topic bytes
# The record fields an event reads (storage/records.py: a 33-byte header, msg_id <= 128,
# topic <= 127 and tag <= 128 characters of UTF-8 <= 512 bytes): every head fits.
HEAD_MAX: Final = 33 + 128 + 127 + 512
# Where an event's fields sit in the head (storage/records.py, _MESSAGE).
ID_AT, N_ID_AT, N_TOPIC_AT, N_TAG_AT, FLAGS_AT, CREATED_AT = 33, 25, 26, 27, 24, 8
__all__ = ["TAG_FLAG"]
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
    FILTERED = 11


KIND_NAMES: Final = ["" for _ in range(max(EventKind) + 1)]
for _kind in EventKind:
    KIND_NAMES[_kind] = _kind.name.lower()

# One staged event: kind, attempt (0 = none), group (b"" = none), topic (b"" = the
# record's), head of the encoded record.
Event = tuple[int, int, bytes, bytes, bytes]


class Span(NamedTuple):
    """Many staged events of one kind without group or topic: one per encoded record (a
    storm's moved timers)."""

    kind: int
    values: list[bytes]


Staged = Event | Span


def encode(staged: Sequence[Staged], now_ms: int) -> bytes:
    """One batch's events (at least one) as one value of the events CF."""
    # Columns, each a list of parts: kinds, attempts, group lengths, topic lengths, head
    # lengths, groups, topics, heads.
    cols: list[list[bytes]] = [[] for _ in range(8)]
    run: list[Event] = []
    for item in staged:
        if type(item) is Span:
            _encode_events(run, cols)
            run = []
            _encode_span(item, cols)
        else:
            run.append(item)  # type: ignore[arg-type]
    _encode_events(run, cols)
    kinds, attempts, glens, tlens, hlens, groups, topics, heads = map(b"".join, cols)
    return b"".join(
        (
            HEADER.pack(VERSION, len(kinds), now_ms, len(groups), len(topics)),
            kinds,
            attempts,
            glens,
            tlens,
            hlens,
            groups,
            topics,
            heads,
        )
    )


def _encode_events(run: list[Event], cols: list[list[bytes]]) -> None:
    if not run:
        return
    kinds, attempts, groups, topics, heads = zip(*run, strict=True)
    for col, part in zip(
        cols,
        (
            bytes(kinds),
            _little("i", attempts),
            bytes(map(len, groups)),
            bytes(map(len, topics)),
            _little("I", map(len, heads)),
        ),
        strict=False,
    ):
        col.append(part)
    cols[5].extend(groups)
    cols[6].extend(topics)
    cols[7].extend(heads)


def _encode_span(span: Span, cols: list[list[bytes]]) -> None:
    n, values = len(span.values), span.values
    # Whole values when they are small on average (no copy per message); else heads only.
    heads = values if sum(map(len, values)) <= n * HEAD_MAX else list(map(_CUT, values))
    cols[0].append(bytes((span.kind,)) * n)
    cols[1].append(bytes(4 * n))
    cols[2].append(bytes(n))
    cols[3].append(bytes(n))
    cols[4].append(_little("I", map(len, heads)))
    cols[7].extend(heads)


_CUT: Callable[[bytes], bytes] = itemgetter(slice(0, HEAD_MAX))


def _little(code: str, values: object) -> bytes:
    arr = array(code, values)  # type: ignore[call-overload]
    if not _LITTLE:
        arr.byteswap()
    return bytes(arr.tobytes())


def count(value: bytes) -> int:
    """How many events a value of the events CF holds."""
    return int(HEADER.unpack_from(value)[1])


def event_time_ms(value: bytes) -> int:
    return int(HEADER.unpack_from(value)[2])
