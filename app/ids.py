"""Server-made message ids: time-ordered like ULID (48-bit ms + 80 random bits, base32)."""

from __future__ import annotations

import base64
import os

# RFC 4648 base32 digits → Crockford's, which sort in the same order as their values.
_CROCKFORD = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", b"0123456789ABCDEFGHJKMNPQRSTVWXYZ"
)


def new_msg_id(now_ms: int) -> str:
    """26 characters; ids made in a later millisecond sort after earlier ones."""
    raw = (now_ms & (2**48 - 1)).to_bytes(6, "big") + os.urandom(10)
    # 128 bits = 25 digits and 3 bits; the fixed length keeps the order of the numbers.
    return base64.b32encode(raw)[:26].translate(_CROCKFORD).decode()
