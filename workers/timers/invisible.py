"""Timer kind: the end of a held message's invisibility (key: hold.py, target
``%INVISIBLE%group``), or of a lot's (the first holds of one receive part, one timer).
Fires a failed attempt for each still held: visible again at once. The ack or nack that
ends the last hold of its lot deletes it (consume._drop_spent_timers); any other holds of
it that moved on (acked, nacked, held again) it passes by at its end."""

from __future__ import annotations

from storage import keys
from storage.events import EventKind
from storage.records import GroupState
from workers import consume
from workers.timers import hold
from workers.timers.kind import one_at_a_time
from workers.txn import Txn

PREFIX = keys.INVISIBLE_PREFIX


def timer_key(due_ms: int, timer: hold.GroupTimer) -> bytes:
    return hold.encode(PREFIX, due_ms, timer)


def decode(key: bytes) -> hold.GroupTimer:
    return hold.decode(PREFIX, key)


def fire(txn: Txn, key: bytes, value: bytes) -> None:
    timer = decode(key)
    settings = None
    for seq, held in consume.current_holds(txn, timer, hold.lot_seqs(timer, value)):
        if held.state is GroupState.INFLIGHT:
            consume.emit_event(txn, EventKind.EXPIRED, timer.topic, timer.group, seq, held.attempts)
            settings = settings or consume.group_settings(txn, timer.topic, timer.group)
            consume.fail(txn, timer.topic, timer.group, seq, held, 0, settings)
            txn.note("expiries")


fire_run = one_at_a_time(fire)
