"""The event log codec: what a batch stages comes back, field for field, in seq order;
a damaged value is a CorruptRecordError, never a wrong row."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import keys
from storage.errors import CorruptRecordError
from storage.event_table import decode
from storage.events import HEAD_MAX, KIND_NAMES, EventKind, Staged
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


# how an item is staged: one event, a span of two (add_many), or a group's lot of two
# (add_group_many, the second with the next attempt)
Item = tuple[EventKind, MessageRecord, str | None, str | None, int, str]
items = st.tuples(
    kinds,
    records,
    st.none() | names,
    st.none() | names,
    st.integers(0, 20),
    st.sampled_from(["one", "span", "lot"]),
)


@pytest.mark.slow  # ~4 s: every example decodes its batches through pyarrow
@settings(deadline=None)  # the first example pays numpy's and pyarrow's warm-up
@given(
    st.lists(st.lists(items, min_size=1, max_size=12), min_size=1, max_size=4),
    st.integers(0, 2**40),
)
def test_staged_events_come_back_in_order(batches: list[list[Item]], first: int) -> None:
    entries: list[tuple[bytes, bytes]] = []
    expected: list[dict[str, object]] = []
    for n, batch in enumerate(batches):
        staged = Staged()
        key = keys.event_key(first + len(expected))
        for kind, rec, maybe_group, maybe_topic, maybe_attempt, how in batch:
            value = encode_message(rec)
            group, topic, attempt = (
                (None, None, 0) if how == "span" else (maybe_group, maybe_topic, maybe_attempt)
            )
            group_b, topic_b = (group or "").encode(), (topic or "").encode()
            if how == "span":
                staged.add_many(kind, [value, value])
            elif how == "lot":
                staged.add_group_many(
                    kind, [value, value], [attempt, attempt + 1], group_b, topic_b
                )
            elif group or topic or attempt:
                staged.add_group(kind, value, attempt, group_b, topic_b)
            else:
                staged.add(kind, value)
            row = {
                "seq": 0,
                "event_time_ms": 77 + n,
                "kind": KIND_NAMES[kind],
                "topic": topic or rec.topic,
                "msg_id": rec.msg_id,
                "group": group or None,
                "attempt": attempt or None,
                "deliver_at_ms": rec.deliver_at_ms,
                "created_at_ms": rec.created_at_ms,
                "tag": rec.tag,
            }
            seq = first + len(expected)
            if how == "lot":
                expected += [{**row, "seq": seq}, {**row, "seq": seq + 1, "attempt": attempt + 1}]
            else:
                expected.extend([{**row, "seq": seq + i} for i in range(1 + (how == "span"))])
        entries.append((key, staged.encode(77 + n)))
    assert decode(entries).to_pylist() == expected


@pytest.mark.parametrize("tag", [None, "t", "x" * 300])
def test_a_storm_stages_each_record_up_to_its_tag(tag: str | None) -> None:
    rec = MessageRecord("topic", "m1", 5, 1, b"b" * 128, tag=tag, properties={"k": "v"})
    value = encode_message(rec)
    staged = Staged()
    staged.add_many(EventKind.DELIVERED, [value, value])
    tag_bytes = len(tag.encode()) if tag else 0
    assert staged.heads == [value[: 33 + len("m1") + len("topic") + tag_bytes]] * 2


def test_an_undone_event_leaves_nothing_behind() -> None:
    staged = Staged()
    record = encode_message(MessageRecord("t", "m", 1, 1, b""))
    staged.add(EventKind.SCHEDULED, record)
    mark = staged.mark()
    staged.add_group(EventKind.ACKED, record, 1, b"g", b"")
    staged.add_many(EventKind.DELIVERED, [record])
    staged.undo(mark)
    staged.add_group(EventKind.NACKED, record, 2, b"h", b"")
    rows = decode([(keys.event_key(5), staged.encode(1))]).to_pylist()
    assert [(r["seq"], r["kind"], r["group"], r["attempt"]) for r in rows] == [
        (5, "scheduled", None, None),
        (6, "nacked", "h", 2),
    ]


def test_a_damaged_value_is_refused() -> None:
    staged = Staged()
    staged.add_group(
        EventKind.ACKED, encode_message(MessageRecord("t", "m", 1, 1, b"")), 1, b"g", b""
    )
    value = staged.encode(5)
    for damaged in (value[:-3], value[:20], b"\x09" + value[1:], value[:17] + b"\x63" + value[18:]):
        with pytest.raises(CorruptRecordError):
            decode([(keys.event_key(0), damaged)])


def test_sealing_does_not_import_pandas(tmp_path: Path) -> None:
    """pyarrow imports pandas (~0.5 s holding the GIL) for ``pa.array`` of numpy; the
    exporter's thread must not pay that beside the writer (bench figure 11)."""
    script = f"""
import sys
from storage import keys
from storage.event_table import decode
from storage.events import EventKind, Staged
from storage.records import MessageRecord, encode_message
from workers import segments
staged = Staged()
staged.add(EventKind.SCHEDULED, encode_message(MessageRecord("t", "m", 1, 1, b"")))
table = decode([(keys.event_key(0), staged.encode(1))])
segments.write({str(tmp_path)!r}, table, "2026-01-01", 0, 0)
assert "pandas" not in sys.modules, "pandas imported"
"""
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_event_columns_are_declared_once(tmp_path: Path) -> None:
    """The Arrow schema the exporter writes, the Spark schema the jobs read, the kinds the
    report counts and the bench's synthetic segments all come from storage/events.py."""
    import pyarrow.parquet as pq

    from bench import events_data
    from pipeline import events as pipeline_events
    from storage.event_table import SCHEMA, SEGMENT_SCHEMA
    from storage.events import COLUMNS, SEGMENT_COLUMNS

    assert [(f.name, str(f.type), f.nullable) for f in SCHEMA] == [
        (name, kind, nullable) for name, kind, nullable in COLUMNS
    ]
    # The jobs read sealed segments: the events' columns and the partition that holds them.
    assert tuple(SEGMENT_SCHEMA.names) == pipeline_events.COLUMNS
    spark = {"long": "int64", "int": "int32", "string": "string"}
    ddl = [column.split() for column in pipeline_events.EVENT_DDL.split(", ")]
    assert [(name.strip("`"), spark[kind]) for name, kind in ddl] == [
        (f.name, str(f.type)) for f in SEGMENT_SCHEMA
    ]
    assert tuple(KIND_NAMES[1:]) == pipeline_events.KINDS
    events_data.write(tmp_path, 500)
    (segment,) = tmp_path.rglob("*.parquet")
    assert pq.read_schema(segment).remove_metadata() == SEGMENT_SCHEMA
    assert [(f.name, str(f.type), f.nullable) for f in SEGMENT_SCHEMA] == [
        (name, kind, nullable) for name, kind, nullable in SEGMENT_COLUMNS
    ]
