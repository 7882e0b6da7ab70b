"""Timer kind: a recurring schedule's next fire. Key ``u64be(fire_at) ‖ %SCHEDULE%topic ‖
0x00 ‖ schedule_id``, value empty; the schedule itself is a meta record (codec here), and
when it fires next is a pure function of it (``next_after``, ``latest_due``). Firing it is
an op: workers/ops/schedules.py.
"""

from __future__ import annotations

import base64
from typing import Any, NamedTuple

import orjson

from storage import keys
from storage.errors import CorruptRecordError
from storage.records import BodyEncoding
from workers.rules import cron
from workers.timers.kind import log

PREFIX = keys.SCHEDULE_PREFIX
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
