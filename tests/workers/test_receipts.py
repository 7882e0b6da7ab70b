"""Receipt handles: opaque, URL-safe, bound to one (topic, group)."""

from __future__ import annotations

import base64
import re
import struct
import zlib

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.storage.strategies import names, relaxed, u64s
from workers.receipts import Receipt, decode_receipt, encode_receipt

URL_SAFE = re.compile(r"^[A-Za-z0-9_-]+$")


@relaxed
@given(topic=names, group=names, seq=u64s, generation=u64s)
def test_receipt_round_trip_and_is_url_safe(
    topic: str, group: str, seq: int, generation: int
) -> None:
    receipt = encode_receipt(topic, group, seq, generation)
    assert URL_SAFE.match(receipt)
    assert decode_receipt(receipt, topic, group) == Receipt(seq, generation)


@relaxed
@given(a=st.tuples(names, names), b=st.tuples(names, names), seq=u64s, generation=u64s)
def test_receipt_of_another_topic_or_group_decodes_to_none(
    a: tuple[str, str], b: tuple[str, str], seq: int, generation: int
) -> None:
    assume(a != b)
    # The owner check is a CRC-32: a collision (odds 2**-32) would be a false accept.
    assume(zlib.crc32("\x00".join(a).encode()) != zlib.crc32("\x00".join(b).encode()))
    assert decode_receipt(encode_receipt(*a, seq, generation), *b) is None


@pytest.mark.parametrize(("topic", "group"), [("t2", "g"), ("t", "g2"), ("g", "t"), ("tg", "")])
def test_receipt_is_bound_to_its_topic_and_group(topic: str, group: str) -> None:
    assert decode_receipt(encode_receipt("t", "g", 7, 1), topic, group) is None


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "garbage",
        "!!!!",
        "ünïcode",
        "=" * 27,
        base64.urlsafe_b64encode(b"\x00" * 19).decode(),  # one byte short
        base64.urlsafe_b64encode(b"\x00" * 21).decode(),  # one byte long
        encode_receipt("t", "g", 1, 1)[:-2],  # truncated
        encode_receipt("t", "g", 1, 1) + "AA",  # extended
    ],
)
def test_garbage_decodes_to_none(garbage: str) -> None:
    assert decode_receipt(garbage, "t", "g") is None


@relaxed
@given(raw=st.binary(min_size=20, max_size=20))
def test_random_handles_with_a_wrong_owner_decode_to_none(raw: bytes) -> None:
    assume(struct.unpack(">QQI", raw)[2] != zlib.crc32(b"t\x00g"))
    receipt = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    assert decode_receipt(receipt, "t", "g") is None


@relaxed
@given(text=st.text(max_size=60))
def test_any_text_decodes_to_none_or_a_receipt(text: str) -> None:
    decoded = decode_receipt(text, "t", "g")
    assert decoded is None or isinstance(decoded, Receipt)
