"""Timer kind: a recurring schedule's next fire. Key ``u64be(fire_at) ‖ %SCHEDULE%topic ‖
0x00 ‖ schedule_id``, value empty; the schedule itself is a meta record (codec here).

Firing delivers one message, msg_id ``{schedule_id}:{fire_at_ms}`` with the property
``schedule_id``, and arms the next fire, in the same batch: a crash can neither skip a
fire (the old key stays until that batch commits) nor make one twice. Fires missed while
the service was down collapse into the latest of them, delivered at once.
"""

from __future__ import annotations

import base64
from typing import Any, NamedTuple

import orjson

from storage import keys
from storage.errors import CorruptRecordError
from storage.events import EventKind
from storage.records import BodyEncoding, MessageRecord, encode_message
from storage.store import CF
from workers import cron, events, messages
from workers.timers.kind import Span, log, one_at_a_time
from workers.txn import Txn

PREFIX = keys.SCHEDULE_PREFIX
PROPERTY = "schedule_id"  # set on every fired message
# Catch-up after downtime walks forward from at most this far back, widening only if no
# fire falls inside (a rare schedule): one restart never walks months of minutes.
CATCH_UP_WINDOWS_MS = (3_600_000, 86_400_000, 32 * 86_400_000, 400 * 86_400_000)


class Schedule(NamedTuple):
    """A recurring schedule as stored (and shown, with topic and schedule_id)."""

    cron: str | None
    every_ms: int | None
    timezone: str
    body: str
    body_encoding: str
    properties: dict[str, str]
    tag: str | None
    start_at_ms: int | None
    end_at_ms: int | None
    created_at_ms: int
    next_fire_at_ms: int | None  # None: no fire left (past end_at_ms)
    last_fire_at_ms: int | None = None

    def view(self, topic: str, schedule_id: str) -> dict[str, Any]:
        return {"topic": topic, "schedule_id": schedule_id, **self._asdict()}


def encode(s: Schedule) -> bytes:
    return orjson.dumps(s._asdict())


def decode(raw: bytes) -> Schedule:
    try:
        return Schedule(**orjson.loads(raw))
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise CorruptRecordError(f"undecodable schedule: {exc}") from exc


def timer_key(fire_at_ms: int, topic: str, schedule_id: str) -> bytes:
    return keys.timer_key(fire_at_ms, PREFIX + topic, schedule_id.encode())


def next_after(s: Schedule, after_ms: int) -> int | None:
    """The schedule's first fire strictly after ``after_ms``, within its window; None if
    there is none, or if a stored schedule cannot say (an expression or zone that no
    longer parses, a fire past the year 9999 or past the last timer key): logged, and
    the schedule stops firing instead of failing the move that fires it."""
    try:
        nxt = _next_after(s, after_ms)
    except (ValueError, ArithmeticError, OSError, TypeError) as exc:  # CronError: ValueError
        log.error("schedule (%s, %s) has no next fire: %s", s.cron, s.timezone, exc)
        return None
    if nxt is not None and nxt > keys.MAX_DUE_MS:
        log.error("schedule (every_ms %s) has no next fire: %d is past every key", s.every_ms, nxt)
        return None
    return nxt


def _next_after(s: Schedule, after_ms: int) -> int | None:
    if s.every_ms is not None:
        first = s.start_at_ms if s.start_at_ms is not None else s.created_at_ms + s.every_ms
        nxt = (
            first
            if after_ms < first
            else first + ((after_ms - first) // s.every_ms + 1) * s.every_ms
        )
    else:
        if s.cron is None:
            raise ValueError("neither cron nor every_ms")
        start = after_ms if s.start_at_ms is None else max(after_ms, s.start_at_ms - 1)
        found = cron.next_after(cron.parse(s.cron), cron.zone(s.timezone), start)
        if found is None:
            return None
        nxt = found
    return nxt if s.end_at_ms is None or nxt <= s.end_at_ms else None


def latest_due(s: Schedule, due_ms: int, now_ms: int) -> int:
    """The latest fire at or before ``now_ms``, from the one due at ``due_ms``."""
    nxt = next_after(s, due_ms)
    if nxt is None or nxt > now_ms:
        return due_ms
    for window in CATCH_UP_WINDOWS_MS:
        latest = None
        at = next_after(s, max(due_ms, now_ms - window))
        while at is not None and at <= now_ms:
            latest, at = at, next_after(s, at)
        if latest is not None:
            return latest
    return nxt


def body_bytes(s: Schedule) -> tuple[bytes, BodyEncoding]:
    if s.body_encoding == "base64":
        return base64.b64decode(s.body), BodyEncoding.BASE64
    return s.body.encode(), BodyEncoding.UTF8


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
            s = decode(raw)
        except CorruptRecordError as exc:
            log.error("skipping the fire of an undecodable schedule: %s", exc)
            continue
        if s.next_fire_at_ms == timer.due_ms:  # else replaced after the scan
            at = latest_due(s, timer.due_ms, txn.now_ms)
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
    s = decode(raw)
    if s.next_fire_at_ms != timer.due_ms:
        return  # replaced after the scan: its new timer fires instead
    d = _Due(topic, schedule_id, s, latest_due(s, timer.due_ms, txn.now_ms))
    _fire(txn, d, txn.get(CF.MESSAGES, d.msg_key) is not None)


def _fire(txn: Txn, d: _Due, already_sent: bool) -> None:
    """Deliver the fire's message (unless its msg_id exists) and arm the next fire."""
    if not already_sent:
        try:
            body, encoding = body_bytes(d.schedule)
        except ValueError as exc:  # a stored body that is not base64: it never will be
            log.error("schedule %r of topic %r stops: its body: %s", d.schedule_id, d.topic, exc)
            stopped = d.schedule._replace(next_fire_at_ms=None)
            txn.put(CF.META, keys.schedule_key(d.topic, d.schedule_id), encode(stopped))
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
    nxt = next_after(s, max(after_ms, txn.now_ms))
    s = s._replace(next_fire_at_ms=nxt)
    txn.put(CF.META, keys.schedule_key(topic, schedule_id), encode(s))
    if nxt is not None:
        txn.put(CF.TIMERS, timer_key(nxt, topic, schedule_id), b"")
        txn.schedule_hint(nxt)
    return s
