"""The event log codec: what a batch stages comes back, field for field, in seq order;
a damaged value is a CorruptRecordError, never a wrong row."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import keys
from storage.errors import CorruptRecordError
from storage.event_table import decode
from storage.events import HEAD_MAX, KIND_NAMES, Event, EventKind, Span, Staged, encode
from storage.records import MessageRecord, encode_message

names = st.from_regex(r"[a-zA-Z0-9_-]{1,20}", fullmatch=True)
records = st.builds(
    MessageRecord,
    topic=names,
    msg_id=names,
    deliver_at_ms=st.integers(0, 2**62),
    created_at_ms=st.integers(0, 2**62),
    body=st.binary(max_size=2 * HEAD_MAX),
    tag=st.none() | st.text(max_size=128),
    properties=st.just({}),
    delivered_at_ms=st.integers(0, 2**62),
)
kinds = st.sampled_from(list(EventKind))


@settings(deadline=None)  # the first example pays numpy's and pyarrow's warm-up
@given(
    st.lists(
        st.tuples(kinds, records, st.none() | names, st.integers(0, 20), st.booleans()),
        min_size=1,
        max_size=30,
    ),
    st.integers(0, 2**40),
)
def test_staged_events_come_back_in_order(
    items: list[tuple[EventKind, MessageRecord, str | None, int, bool]], first: int
) -> None:
    staged: list[Staged] = []
    expected: list[dict[str, object]] = []
    for kind, rec, maybe_group, maybe_attempt, as_span in items:
        value = encode_message(rec)
        group, attempt = (None, 0) if as_span else (maybe_group, maybe_attempt)
        if as_span:
            staged.append(Span(kind, [value]))
        else:
            event: Event = (kind, attempt, (group or "").encode(), b"", value[:HEAD_MAX])
            staged.append(event)
        expected.append(
            {
                "seq": first + len(expected),
                "event_time_ms": 77,
                "kind": KIND_NAMES[kind],
                "topic": rec.topic,
                "msg_id": rec.msg_id,
                "group": group or None,
                "attempt": attempt or None,
                "deliver_at_ms": rec.deliver_at_ms,
                "created_at_ms": rec.created_at_ms,
                "tag": rec.tag,
            }
        )
    table = decode([(keys.event_key(first), encode(staged, 77))])
    assert table.to_pylist() == expected


def test_a_damaged_value_is_refused() -> None:
    value = encode(
        [(EventKind.ACKED, 1, b"g", b"", encode_message(MessageRecord("t", "m", 1, 1, b"")))], 5
    )
    for damaged in (value[:-3], value[:20], b"\x09" + value[1:], value[:17] + b"\x63" + value[18:]):
        with pytest.raises(CorruptRecordError):
            decode([(keys.event_key(0), damaged)])
