"""Receipt handles: an opaque, URL-safe, unforgeable encoding of (seq, generation).

A receipt carries a 128-bit MAC with a secret kept in the store (keyed BLAKE2b, a MAC by
design; a quarter of HMAC-SHA256's cost on the receive and ack paths), over the topic,
group, seq and generation: one built by hand, or presented on another topic or group,
does not verify and comes back ``unknown``.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import hmac
import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

from storage import keys

_HEAD = struct.Struct(">QQ")
MAC_BYTES = 16
RECEIPT_CHARS = 43  # base64 of 8 + 8 + 16 bytes, unpadded
_PADDED = RECEIPT_CHARS + 1  # as binascii writes it: one "=" after
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
# From URL-safe base64; '+' and '/' become '!', which strict decoding refuses: one value has
# one spelling (standard base64's characters would be a second)
_FROM_URLSAFE = bytes.maketrans(b"-_+/", b"+/!!")
# The last of 43 characters carries 2 bits that are not data: those with them zero. Any
# other would decode to the same value, a third, fourth and fifth spelling.
_CANONICAL_LAST = frozenset("AEIMQUYcgkosw048")


class Receipt(NamedTuple):
    seq: int
    generation: int


@functools.lru_cache(maxsize=4096)
def _keyed(secret: bytes, topic: str, group: str) -> Any:
    """The MAC's state after the key and the owner (copied per receipt: half the cost)."""
    state = hashlib.blake2b(key=secret, digest_size=MAC_BYTES)
    state.update(topic.encode() + keys.SEP + group.encode() + keys.SEP)
    return state


def encode_receipts(
    secret: bytes, topic: str, group: str, held: Sequence[tuple[int, int]]
) -> list[str]:
    """The receipt of each ``(seq, generation)``: a receive's replies made per op, the
    URL-safe translation and the text made once for them all."""
    keyed = _keyed(secret, topic, group)
    pack, b64 = _HEAD.pack, binascii.b2a_base64
    padded = []
    for seq, generation in held:
        head = pack(seq, generation)
        state = keyed.copy()
        state.update(head)
        padded.append(b64(head + state.digest(), newline=False))
    text = b"".join(padded).translate(_TO_URLSAFE).decode()
    return [text[i : i + RECEIPT_CHARS] for i in range(0, len(text), _PADDED)]


def encode_receipt(secret: bytes, topic: str, group: str, seq: int, generation: int) -> str:
    return encode_receipts(secret, topic, group, ((seq, generation),))[0]


def decode_receipts(
    secret: bytes, receipts: Sequence[str], topic: str, group: str
) -> list[Receipt | None]:
    """Each receipt's (seq, generation), or None unless it was made for this topic and
    group (the MAC's keyed state looked up once for them all)."""
    keyed = _keyed(secret, topic, group)
    out: list[Receipt | None] = []
    for receipt in receipts:
        if (
            len(receipt) != RECEIPT_CHARS
            or not receipt.isascii()
            or receipt[-1] not in _CANONICAL_LAST
        ):
            out.append(None)
            continue
        try:
            text = receipt.encode().translate(_FROM_URLSAFE) + b"="
            raw = binascii.a2b_base64(text, strict_mode=True)
        except (binascii.Error, ValueError):
            out.append(None)
            continue
        head, mac = raw[: _HEAD.size], raw[_HEAD.size :]
        state = keyed.copy()
        state.update(head)
        if len(mac) != MAC_BYTES or not hmac.compare_digest(mac, state.digest()):
            out.append(None)
            continue
        out.append(tuple.__new__(Receipt, _HEAD.unpack(head)))
    return out


def decode_receipt(secret: bytes, receipt: str, topic: str, group: str) -> Receipt | None:
    """The receipt's (seq, generation), or None unless it was made for this topic and group."""
    return decode_receipts(secret, (receipt,), topic, group)[0]
