"""Timer kind: the end of a failed message's retry back-off (key: hold.py, target
``%RETRY%group``). Fires the message into the group's retry lane, visible again."""

from __future__ import annotations

from collections.abc import Iterable

from storage import keys
from storage.records import GroupState
from workers import consume
from workers.timers import hold
from workers.timers.kind import one_at_a_time
from workers.txn import Txn

PREFIX = keys.RETRY_PREFIX


def timer_key(due_ms: int, timer: hold.GroupTimer) -> bytes:
    return hold.encode(PREFIX, due_ms, timer)


def timer_keys(topic: str, group: str, held: Iterable[tuple[int, int, int]]) -> list[bytes]:
    """``timer_key`` of each ``(due_ms, seq, generation)`` of one topic and group."""
    return hold.encode_many(PREFIX, topic, group, held)


def fire(txn: Txn, key: bytes, value: bytes) -> None:
    timer = hold.decode(PREFIX, key)
    for seq, held in consume.current_holds(txn, timer, [timer.seq]):
        if held.state is GroupState.RETRYING:
            txn.count_group(timer.topic, timer.group, retrying=-1)
            consume.make_ready(txn, timer.topic, timer.group, seq, held)


fire_run = one_at_a_time(fire)
