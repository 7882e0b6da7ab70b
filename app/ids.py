"""Server-made message ids: time-ordered like ULID (48-bit ms + 80 random bits, base32)."""

from __future__ import annotations

import os

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32, sorts like the numbers


def new_msg_id(now_ms: int) -> str:
    value = (now_ms & (2**48 - 1)) << 80 | int.from_bytes(os.urandom(10), "big")
    out = []
    for _ in range(26):
        value, digit = divmod(value, 32)
        out.append(_ALPHABET[digit])
    return "".join(reversed(out))
