"""Recurring schedules (api.md v1 additions): put, delete (on the writer thread), get and
list (anywhere). Their fires are timer keys of their own kind: workers/timers/schedule.py."""

from __future__ import annotations

from storage import keys
from storage.errors import ScheduleNotFound
from storage.store import CF, RocksStore
from workers.timers import schedule
from workers.timers.schedule import Schedule
from workers.txn import Txn


def put(txn: Txn, topic: str, schedule_id: str, spec: Schedule) -> tuple[bool, Schedule]:
    """Create or replace a schedule and arm its next fire; returns (created, stored).

    A replaced schedule keeps its created_at_ms and last fire, so an every_ms schedule
    keeps its phase; its old timer key goes in the same batch.
    """
    raw = txn.get(CF.META, keys.schedule_key(topic, schedule_id))
    old = schedule.decode(raw) if raw is not None else None
    if old is not None and old.next_fire_at_ms is not None:
        txn.delete(CF.TIMERS, schedule.timer_key(old.next_fire_at_ms, topic, schedule_id))
    spec = spec._replace(
        created_at_ms=old.created_at_ms if old else txn.now_ms,
        last_fire_at_ms=old.last_fire_at_ms if old else None,
    )
    txn.sync = True
    return old is None, schedule.arm(txn, topic, schedule_id, spec, txn.now_ms)


def delete(txn: Txn, topic: str, schedule_id: str) -> Schedule:
    """Remove a schedule and its next fire in one batch: nothing fires after it."""
    slot = keys.schedule_key(topic, schedule_id)
    raw = txn.get(CF.META, slot)
    if raw is None:
        raise ScheduleNotFound(f"no schedule {schedule_id!r} in topic {topic!r}")
    old = schedule.decode(raw)
    if old.next_fire_at_ms is not None:
        txn.delete(CF.TIMERS, schedule.timer_key(old.next_fire_at_ms, topic, schedule_id))
    txn.delete(CF.META, slot)
    txn.sync = True
    return old


def get(store: RocksStore, topic: str, schedule_id: str) -> Schedule:
    raw = store.get(CF.META, keys.schedule_key(topic, schedule_id))
    if raw is None:
        raise ScheduleNotFound(f"no schedule {schedule_id!r} in topic {topic!r}")
    return schedule.decode(raw)


def page(
    store: RocksStore, topic: str, after: str | None, limit: int
) -> tuple[list[tuple[str, Schedule]], bool]:
    """Up to ``limit`` schedules of ``topic`` by id, after the id ``after``; and whether
    more follow."""
    prefix = keys.schedule_prefix(topic)
    start = keys.successor(prefix + after.encode()) if after else prefix
    found = store.scan(CF.META, start, keys.prefix_end(prefix), limit + 1)
    items = [(k[len(prefix) :].decode(), schedule.decode(v)) for k, v in found[:limit]]
    return items, len(found) > limit
