"""Timer kind: the end of a failed message's retry back-off (key: hold.py, target
``%RETRY%group``). Its fire action is consume.end_retry_wait: the message goes into the
group's retry lane, visible again.

The codec only: the consumer ops encode these keys, so this module imports none of them."""

from __future__ import annotations

from collections.abc import Iterable

from storage import keys
from workers.timers import hold

PREFIX = keys.RETRY_PREFIX


def timer_key(due_ms: int, timer: hold.GroupTimer) -> bytes:
    return hold.encode(PREFIX, due_ms, timer)


def timer_keys(topic: str, group: str, held: Iterable[tuple[int, int, int]]) -> list[bytes]:
    """``timer_key`` of each ``(due_ms, seq, generation)`` of one topic and group."""
    return hold.encode_many(PREFIX, topic, group, held)
