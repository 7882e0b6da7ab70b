"""Receipt handles: an opaque, URL-safe, unforgeable encoding of (seq, generation).

A receipt carries a MAC (HMAC-SHA256, cut to 128 bits) with a secret kept in the store,
over the topic, group, seq and generation: one built by hand, or presented on another
topic or group, does not verify and comes back ``unknown``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import struct
from typing import NamedTuple

from storage import keys

_HEAD = struct.Struct(">QQ")
MAC_BYTES = 16
RECEIPT_CHARS = 43  # base64 of 8 + 8 + 16 bytes, unpadded


class Receipt(NamedTuple):
    seq: int
    generation: int


def _mac(secret: bytes, topic: str, group: str, head: bytes) -> bytes:
    owner = topic.encode() + keys.SEP + group.encode() + keys.SEP
    return hmac.digest(secret, owner + head, "sha256")[:MAC_BYTES]


def encode_receipt(secret: bytes, topic: str, group: str, seq: int, generation: int) -> str:
    head = _HEAD.pack(seq, generation)
    raw = head + _mac(secret, topic, group, head)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_receipt(secret: bytes, receipt: str, topic: str, group: str) -> Receipt | None:
    """The receipt's (seq, generation), or None unless it was made for this topic and group."""
    if len(receipt) != RECEIPT_CHARS:
        return None
    try:
        raw = base64.urlsafe_b64decode(receipt + "=")
    except (binascii.Error, ValueError):
        return None
    head, mac = raw[: _HEAD.size], raw[_HEAD.size :]
    if len(mac) != MAC_BYTES or not hmac.compare_digest(mac, _mac(secret, topic, group, head)):
        return None
    seq, generation = _HEAD.unpack(head)
    return Receipt(seq, generation)
