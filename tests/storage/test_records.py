"""Value codecs: messages, index entries, and in-flight records round-trip."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage import records
from storage.errors import CorruptRecordError
from storage.records import (
    BodyEncoding,
    GroupState,
    IndexEntry,
    Inflight,
    MessageRecord,
    MessageState,
    decode_index,
    decode_inflight,
    decode_message,
    encode_index,
    encode_inflight,
    encode_message,
)
from tests.storage.strategies import msg_ids, names, relaxed, u64s

# Text that UTF-8 can encode (no lone surrogates).
texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)

messages = st.builds(
    MessageRecord,
    topic=names,
    msg_id=msg_ids,
    deliver_at_ms=u64s,
    created_at_ms=u64s,
    body=st.binary(max_size=300),
    body_encoding=st.sampled_from(BodyEncoding),
    tag=st.none() | texts,
    properties=st.dictionaries(texts, texts, max_size=6),
    delivered_at_ms=u64s,
)


@relaxed
@given(messages)
def test_message_round_trip(rec: MessageRecord) -> None:
    assert decode_message(encode_message(rec)) == rec


def test_message_round_trip_binary_body_without_tag_or_properties() -> None:
    body = bytes(range(256)) * 4 + b"\x00\xff"
    rec = MessageRecord("t", "m", 1, 2, body, BodyEncoding.BASE64)
    decoded = decode_message(encode_message(rec))
    assert decoded == rec
    assert decoded.tag is None
    assert decoded.properties == {}
    assert decoded.body == body


def test_empty_tag_is_not_no_tag() -> None:
    with_empty = decode_message(encode_message(MessageRecord("t", "m", 1, 2, b"", tag="")))
    without = decode_message(encode_message(MessageRecord("t", "m", 1, 2, b"")))
    assert with_empty.tag == ""
    assert without.tag is None


def test_message_with_tag_properties_and_large_body() -> None:
    rec = MessageRecord(
        topic="%DLQ%g",
        msg_id="a" * 128,
        deliver_at_ms=2**64 - 1,
        created_at_ms=0,
        body=b"\x00" * (4 * 1024 * 1024),
        tag="t" * 1000,
        properties={"k": "v", "ünï": "☃", "": ""},
    )
    assert decode_message(encode_message(rec)) == rec


def test_delivered_sets_only_delivered_at() -> None:
    rec = MessageRecord("t", "m", 10, 5, b"x", tag="a", properties={"p": "q"})
    assert rec.delivered(42) == MessageRecord(
        "t", "m", 10, 5, b"x", tag="a", properties={"p": "q"}, delivered_at_ms=42
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00" * 10,  # shorter than the header
        struct.pack(">QQQBBBHI", 1, 2, 3, 0x05, 0, 0, 0, 0),  # unknown body encoding
        struct.pack(">QQQBBBHI", 1, 2, 3, 0, 1, 0, 0, 0) + b"\xff",  # msg_id not UTF-8
        struct.pack(">QQQBBBHI", 1, 2, 3, 0, 0, 0, 0, 3) + b"{x}",  # properties not JSON
    ],
)
def test_undecodable_message_raises_corrupt_record(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_message(data)


@relaxed
@given(
    state=st.sampled_from(MessageState),
    due=u64s,
    created=u64s,
    done=u64s,
    seq=u64s,
)
def test_index_round_trip(state: MessageState, due: int, created: int, done: int, seq: int) -> None:
    entry = IndexEntry(state, due, created, done, seq)
    assert decode_index(encode_index(entry)) == entry


@pytest.mark.parametrize(
    "data", [b"", b"\x01" * 5, struct.pack(">BQQQQ", 9, 0, 0, 0, 0), b"\x01" * 34]
)
def test_undecodable_index_raises_corrupt_record(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_index(data)


@relaxed
@given(
    state=st.sampled_from(GroupState),
    attempts=st.integers(min_value=0, max_value=2**16 - 1),
    generation=u64s,
    deadline=u64s,
    failure=u64s,
)
def test_inflight_round_trip(
    state: GroupState, attempts: int, generation: int, deadline: int, failure: int
) -> None:
    rec = Inflight(state, attempts, generation, deadline, failure)
    assert decode_inflight(encode_inflight(rec)) == rec


@pytest.mark.parametrize("data", [b"", b"\x01", struct.pack(">BHQQQ", 0, 1, 1, 1, 1)])
def test_undecodable_inflight_raises_corrupt_record(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_inflight(data)


def test_a_record_cut_short_is_corrupt_not_a_wrong_record() -> None:
    data = encode_message(MessageRecord("topic", "msg-id", 1, 2, b"", tag="tag"))
    for cut in range(len(data) - 1, 32, -1):
        with pytest.raises(CorruptRecordError):
            decode_message(data[:cut])


def test_the_header_offsets_are_where_encode_puts_each_field() -> None:
    """The offsets other modules cut fields at (the event codec, the storm path) are read
    off the header's one declaration, and match an encoded record."""
    rec = MessageRecord(
        "topic-x", "id-12", 11, 22, b"body", BodyEncoding.BASE64, "tag", {"k": "v"}, 33
    )
    raw = encode_message(rec)
    assert records.HEADER_SIZE == 33
    assert int.from_bytes(raw[records.CREATED_AT_OFFSET :][:8], "big") == 22
    assert int.from_bytes(raw[records.DELIVERED_AT_SLICE], "big") == 33
    assert raw[records.FLAGS_AT] == BodyEncoding.BASE64 | records.TAG_FLAG
    assert (raw[records.N_ID_AT], raw[records.N_TOPIC_AT]) == (5, 7)
    assert int.from_bytes(raw[records.N_TAG_AT : records.N_TAG_AT + 2], "big") == 3
    assert raw[records.HEADER_SIZE :][:5] == b"id-12"
    assert "33 bytes" in (records.__doc__ or "")
