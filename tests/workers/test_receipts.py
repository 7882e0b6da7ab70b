"""Receipt handles: opaque, URL-safe, unforgeable, bound to one (topic, group)."""

from __future__ import annotations

import base64
import re
import struct
import zlib

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.storage.strategies import names, relaxed, u64s
from workers.rules.receipts import Receipt, decode_receipt, encode_receipt

URL_SAFE = re.compile(r"^[A-Za-z0-9_-]+$")
SECRET = b"s" * 32


def forge_crc_receipt(topic: str, group: str, seq: int, generation: int) -> str:
    """A receipt as the old scheme made it: anyone could build one, no secret needed."""
    raw = struct.pack(">QQI", seq, generation, zlib.crc32(f"{topic}\x00{group}".encode()))
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@relaxed
@given(topic=names, group=names, seq=u64s, generation=u64s)
def test_receipt_round_trip_and_is_url_safe(
    topic: str, group: str, seq: int, generation: int
) -> None:
    receipt = encode_receipt(SECRET, topic, group, seq, generation)
    assert URL_SAFE.match(receipt)
    assert decode_receipt(SECRET, receipt, topic, group) == Receipt(seq, generation)


@relaxed
@given(a=st.tuples(names, names), b=st.tuples(names, names), seq=u64s, generation=u64s)
def test_receipt_of_another_topic_or_group_decodes_to_none(
    a: tuple[str, str], b: tuple[str, str], seq: int, generation: int
) -> None:
    assume(a != b)
    assert decode_receipt(SECRET, encode_receipt(SECRET, *a, seq, generation), *b) is None


def test_groups_whose_crc_collides_get_different_receipts() -> None:
    """Issue 10.6: g29685295 and g32060020 on topic rt had byte-identical receipts."""
    assert zlib.crc32(b"rt\x00g29685295") == zlib.crc32(b"rt\x00g32060020")
    one = encode_receipt(SECRET, "rt", "g29685295", 0, 1)
    assert one != encode_receipt(SECRET, "rt", "g32060020", 0, 1)
    assert decode_receipt(SECRET, one, "rt", "g32060020") is None


def test_a_receipt_built_without_the_secret_is_refused() -> None:
    assert decode_receipt(SECRET, forge_crc_receipt("t", "g", 0, 1), "t", "g") is None
    other = encode_receipt(b"x" * 32, "t", "g", 0, 1)  # another store's secret
    assert decode_receipt(SECRET, other, "t", "g") is None


@pytest.mark.parametrize(("topic", "group"), [("t2", "g"), ("t", "g2"), ("g", "t"), ("tg", "")])
def test_receipt_is_bound_to_its_topic_and_group(topic: str, group: str) -> None:
    assert decode_receipt(SECRET, encode_receipt(SECRET, "t", "g", 7, 1), topic, group) is None


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "garbage",
        "!!!!",
        "ünïcode" * 6 + "a",
        "=" * 43,
        base64.urlsafe_b64encode(b"\x00" * 31).decode(),  # one byte short
        base64.urlsafe_b64encode(b"\x00" * 33).decode(),  # one byte long
        encode_receipt(SECRET, "t", "g", 1, 1)[:-2],  # truncated
        encode_receipt(SECRET, "t", "g", 1, 1) + "AA",  # extended
    ],
)
def test_garbage_decodes_to_none(garbage: str) -> None:
    assert decode_receipt(SECRET, garbage, "t", "g") is None


@relaxed
@given(raw=st.binary(min_size=32, max_size=32))
def test_random_handles_decode_to_none(raw: bytes) -> None:
    receipt = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    assert decode_receipt(SECRET, receipt, "t", "g") is None


@relaxed
@given(text=st.text(max_size=60))
def test_any_text_decodes_to_none_or_a_receipt(text: str) -> None:
    decoded = decode_receipt(SECRET, text, "t", "g")
    assert decoded is None or isinstance(decoded, Receipt)


@relaxed
@given(topic=names, group=names, seq=u64s, generation=u64s)
def test_a_receipt_has_one_spelling(topic: str, group: str, seq: int, generation: int) -> None:
    """Issue 30.9: the last character's two bits that carry no data, and standard base64's
    '+' and '/', gave one receipt up to eight spellings that all acked the message."""
    receipt = encode_receipt(SECRET, topic, group, seq, generation)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(receipt[-1])
    assert last % 4 == 0
    for other in alphabet[last + 1 : last + 4]:  # the same 6 data bits, unused bits set
        assert base64.urlsafe_b64decode(receipt[:-1] + other + "=") == base64.urlsafe_b64decode(
            receipt + "="
        )
        assert decode_receipt(SECRET, receipt[:-1] + other, topic, group) is None
    standard = receipt.replace("-", "+").replace("_", "/")
    if standard != receipt:
        assert decode_receipt(SECRET, standard, topic, group) is None
    assert decode_receipt(SECRET, receipt, topic, group) == Receipt(seq, generation)
