"""Receipt handles: an opaque, URL-safe encoding of (topic, group, seq, generation).

The topic and group are not readable from a receipt, only checked: a 32-bit CRC of them
makes a receipt presented on another topic or group come back ``unknown``.
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from typing import NamedTuple

_RECEIPT = struct.Struct(">QQI")


class Receipt(NamedTuple):
    seq: int
    generation: int


def _owner(topic: str, group: str) -> int:
    return zlib.crc32(topic.encode() + b"\x00" + group.encode())


def encode_receipt(topic: str, group: str, seq: int, generation: int) -> str:
    raw = _RECEIPT.pack(seq, generation, _owner(topic, group))
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_receipt(receipt: str, topic: str, group: str) -> Receipt | None:
    """The receipt's (seq, generation), or None if it is not one of this topic and group."""
    try:
        raw = base64.urlsafe_b64decode(receipt + "=" * (-len(receipt) % 4))
        seq, generation, owner = _RECEIPT.unpack(raw)
    except (binascii.Error, struct.error, ValueError):
        return None
    if owner != _owner(topic, group):
        return None
    return Receipt(seq, generation)
