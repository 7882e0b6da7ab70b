"""Timer kind: the end of a held message's invisibility (key: hold.py, target
``%INVISIBLE%group``), or of a lot's (the first holds of one receive part, one timer).
Its fire action is consume.end_invisibility: a failed attempt for each still held. The
ack or nack that ends the last hold of its lot deletes it (consume._drop_spent_timers);
any other holds of it that moved on (acked, nacked, held again) it passes by at its end.

The codec only: the consumer ops encode these keys, so this module imports none of them."""

from __future__ import annotations

from storage import keys
from workers.timers import hold

PREFIX = keys.INVISIBLE_PREFIX


def timer_key(due_ms: int, timer: hold.GroupTimer) -> bytes:
    return hold.encode(PREFIX, due_ms, timer)


def decode(key: bytes) -> hold.GroupTimer:
    return hold.decode(PREFIX, key)
