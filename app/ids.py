"""Server-made message ids: time-ordered (48-bit ms, then 80 random bits), in hex.

Like ULID or UUIDv7, ids made in a later millisecond sort after earlier ones. Hex keeps
the making to one format call (base32 is pure Python in 3.11 and cost 2.5 µs an id), and
the random part comes from a seeded PRNG, not a getrandom() syscall per id: ids must be
unique, not secret.
"""

from __future__ import annotations

import os
import random

_random = random.Random(os.urandom(32))


def new_msg_id(now_ms: int) -> str:
    """32 hex characters: 12 of milliseconds since the epoch, 20 random."""
    return f"{now_ms & 0xFFFF_FFFF_FFFF:012x}{_random.getrandbits(80):020x}"
