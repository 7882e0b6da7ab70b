"""Recurring schedules (api.md v1 additions): put, delete and fire (on the writer thread),
get and list (anywhere). Their fires are timer keys of their own kind (codec and timing:
workers/timers/schedule.py).

Firing delivers one message, msg_id ``{schedule_id}:{fire_at_ms}`` with the property
``schedule_id``, and arms the next fire, in the same batch: a crash can neither skip a
fire (the old key stays until that batch commits) nor make one twice. Fires missed while
the service was down collapse into the latest of them, delivered at once.
"""

from __future__ import annotations

from typing import NamedTuple

from storage import keys
from storage.errors import CorruptRecordError, ScheduleNotFound
from storage.events import EventKind
from storage.records import MessageRecord, encode_message
from storage.store import CF, RocksStore
from storage.txn import Txn
from workers.ops import events, messages
from workers.timers import schedule
from workers.timers.kind import Span, log, one_at_a_time
from workers.timers.schedule import PREFIX, Schedule

PROPERTY = "schedule_id"  # set on every fired message


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
    return old is None, arm(txn, topic, schedule_id, spec, txn.now_ms)


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


class _Due(NamedTuple):
    topic: str
    schedule_id: str
    schedule: Schedule
    fire_at: int

    @property
    def msg_id(self) -> str:
        return f"{self.schedule_id}:{self.fire_at}"

    @property
    def msg_key(self) -> bytes:
        return keys.message_key(self.topic, self.msg_id)


def fire_run(span: Span, start: int, stop: int) -> None:
    """Fire a run of schedule timers: the schedules, then their fires' msg_ids, each read
    with one multi-get (100k schedules firing every minute are ~1,700 fires a second, in
    runs of a few to thousands). A schedule deleted or replaced after the scan is skipped:
    its timer key is not the one it stores any more."""
    txn = span.txn
    timers: list[keys.TimerKey] = []
    for key, _ in span.entries[start:stop]:
        try:
            timers.append(keys.decode_timer_key(key))
        except CorruptRecordError as exc:
            log.error("skipping an undecodable timer: %s", exc)
    # An ident that is not UTF-8 names no schedule (ids are ASCII): its lookup finds none.
    named = [(t.target[len(PREFIX) :], t.ident.decode(errors="replace")) for t in timers]
    slots = [keys.schedule_key(topic, sid) for topic, sid in named]
    if len(set(slots)) < len(slots):  # never made by this code (one timer per schedule)
        one_at_a_time(fire)(span, start, stop)
        return
    due: list[_Due] = []
    for timer, (topic, sid), raw in zip(timers, named, txn.get_many(CF.META, slots), strict=True):
        if raw is None:
            continue  # deleted after the scan
        try:
            s = schedule.decode(raw)
        except CorruptRecordError as exc:
            log.error("skipping the fire of an undecodable schedule: %s", exc)
            continue
        if s.next_fire_at_ms == timer.due_ms:  # else replaced after the scan
            at = schedule.latest_due(s, timer.due_ms, txn.now_ms)
            due.append(_Due(topic, sid, s, at))
    sent = txn.get_many(CF.MESSAGES, [d.msg_key for d in due])
    for d, already in zip(due, sent, strict=True):
        _fire(txn, d, already is not None)


def fire(txn: Txn, key: bytes, value: bytes) -> None:
    """Fire one schedule timer (as ``fire_run`` does a run of them)."""
    timer = keys.decode_timer_key(key)
    topic, schedule_id = timer.target[len(PREFIX) :], timer.ident.decode(errors="replace")
    raw = txn.get(CF.META, keys.schedule_key(topic, schedule_id))
    if raw is None:
        return  # deleted after the scan
    s = schedule.decode(raw)
    if s.next_fire_at_ms != timer.due_ms:
        return  # replaced after the scan: its new timer fires instead
    d = _Due(topic, schedule_id, s, schedule.latest_due(s, timer.due_ms, txn.now_ms))
    _fire(txn, d, txn.get(CF.MESSAGES, d.msg_key) is not None)


def _fire(txn: Txn, d: _Due, already_sent: bool) -> None:
    """Deliver the fire's message (unless its msg_id exists) and arm the next fire."""
    if not already_sent:
        try:
            body, encoding = schedule.body_bytes(d.schedule)
        except ValueError as exc:  # a stored body that is not base64: it never will be
            log.error("schedule %r of topic %r stops: its body: %s", d.schedule_id, d.topic, exc)
            stopped = d.schedule._replace(next_fire_at_ms=None)
            txn.put(CF.META, keys.schedule_key(d.topic, d.schedule_id), schedule.encode(stopped))
            return
        props = {**d.schedule.properties, PROPERTY: d.schedule_id}
        rec = MessageRecord(
            d.topic, d.msg_id, d.fire_at, txn.now_ms, body, encoding, d.schedule.tag, props
        )
        events.emit(txn, EventKind.SCHEDULED, encode_message(rec))
        messages.deliver(txn, rec)
    s = d.schedule._replace(last_fire_at_ms=d.fire_at)
    arm(txn, d.topic, d.schedule_id, s, d.fire_at)


def arm(txn: Txn, topic: str, schedule_id: str, s: Schedule, after_ms: int) -> Schedule:
    """Store the schedule with its next fire after ``after_ms`` (and never at or before
    this batch's now: a timer key is always in the future, Writer.scan_horizon), and put
    that fire's timer key."""
    nxt = schedule.next_after(s, max(after_ms, txn.now_ms))
    s = s._replace(next_fire_at_ms=nxt)
    txn.put(CF.META, keys.schedule_key(topic, schedule_id), schedule.encode(s))
    if nxt is not None:
        txn.put(CF.TIMERS, schedule.timer_key(nxt, topic, schedule_id), b"")
        txn.schedule_hint(nxt)
    return s
