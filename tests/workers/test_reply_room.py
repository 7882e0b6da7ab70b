"""A receive reply's byte budget (consume.Room): counted as the reply is serialized, JSON's
escapes included, however the records come (one part or many, small or large)."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from storage.records import BodyEncoding, MessageRecord, encode_message
from tests.storage.strategies import relaxed
from workers.ops.consume import Room, _reply_bytes

RECEIPT = "A" * 43
# Text JSON escapes (control characters, quotes, backslashes) and text it does not
bodies = st.text(alphabet=st.sampled_from('\x00\x01\x1f\n\t"\\ax\u00e9\u2028'), max_size=3000)


def record(body: str, base64: bool = False) -> bytes:
    encoding = BodyEncoding.BASE64 if base64 else BodyEncoding.UTF8
    return encode_message(
        MessageRecord("t", "m-1", 1, 2, body.encode(), encoding, tag="T", properties={"k": "v"})
    )


def serialized(body: str) -> int:
    """What the reply's item for such a record takes (app/routes/common.received_item)."""
    item = {
        "msg_id": "m-1",
        "body": body,
        "body_encoding": "utf8",
        "properties": {"k": "v"},
        "deliver_at_ms": 1,
        "tag": "T",
        "topic": "t",
        "delivered_at_ms": 2**62,
        "attempt": 16,
        "receipt": RECEIPT,
    }
    return len(orjson.dumps(item)) + 1  # and a comma


@relaxed
@given(body=bodies)
def test_a_record_counts_at_least_its_serialized_item(body: str) -> None:
    """Issue 30.6: a body of control characters is six times its size in JSON."""
    assert _reply_bytes(record(body)) >= serialized(body)


@relaxed
@given(
    texts=st.lists(bodies, min_size=1, max_size=40),
    parts=st.lists(st.integers(min_value=1, max_value=10), min_size=1, max_size=40),
    budget=st.integers(min_value=1, max_value=60_000),
)
def test_a_budget_taken_in_parts_holds_as_serialized(
    texts: list[str], parts: list[int], budget: int
) -> None:
    """Taken in parts (Engine.receive's), the records fit the budget as serialized, the
    first always; the stop comes only at a record that would not fit."""
    records = [record(t) for t in texts]
    room = Room(budget)
    taken = 0
    for n in parts:
        part = records[taken : taken + n]
        got = room.take(part)
        taken += got
        if got < len(part):
            break
    assert taken >= 1
    used = sum(_reply_bytes(r) for r in records[:taken])
    assert taken == 1 or used <= budget
    if taken < len(records) and taken < sum(parts):
        assert used + _reply_bytes(records[taken]) > budget
