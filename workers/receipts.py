"""Receipt handles: an opaque, URL-safe, unforgeable encoding of (seq, generation).

A receipt carries a 128-bit MAC with a secret kept in the store (keyed BLAKE2b, a MAC by
design; a quarter of HMAC-SHA256's cost on the receive and ack paths), over the topic,
group, seq and generation: one built by hand, or presented on another topic or group,
does not verify and comes back ``unknown``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import struct
from typing import Any, NamedTuple

from storage import keys

_HEAD = struct.Struct(">QQ")
MAC_BYTES = 16
RECEIPT_CHARS = 43  # base64 of 8 + 8 + 16 bytes, unpadded


class Receipt(NamedTuple):
    seq: int
    generation: int


@functools.lru_cache(maxsize=4096)
def _keyed(secret: bytes, topic: str, group: str) -> Any:
    """The MAC's state after the key and the owner (copied per receipt: half the cost)."""
    state = hashlib.blake2b(key=secret, digest_size=MAC_BYTES)
    state.update(topic.encode() + keys.SEP + group.encode() + keys.SEP)
    return state


def _mac(secret: bytes, topic: str, group: str, head: bytes) -> bytes:
    state = _keyed(secret, topic, group).copy()
    state.update(head)
    mac: bytes = state.digest()
    return mac


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
