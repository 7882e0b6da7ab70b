"""Five-field cron expressions evaluated in an IANA time zone, with the daylight-saving
rules of api.md: a wall-clock time that a spring-forward skips does not fire, and one
that a fall-back repeats fires once (at its first occurrence).

Why our own and not a library: the maintained ones (cronsim, crondst; croniter's
maintenance changed hands in 2024-25) follow Vixie/Debian cron, which fires a skipped
time right after the change; the contract says it does not fire. What is needed is
small: parse five fields (``*``, lists, ranges, steps, month and weekday names) and find
the next matching minute, which here is pure and tested against a brute-force walk.
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import re
from typing import NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

SEARCH_DAYS = 5 * 366 + 1  # no match within five years: the expression never fires
_MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
_MONTHS = {m: i + 1 for i, m in enumerate(_MONTH_NAMES)}
_DAYS = {d: i for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
_UTC = dt.UTC


class CronError(ValueError):
    """A malformed expression or an unknown time zone; the message says which part."""


class _Field(NamedTuple):
    name: str
    low: int
    high: int
    names: dict[str, int]


_FIELDS = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day of month", 1, 31, {}),
    _Field("month", 1, 12, _MONTHS),
    _Field("day of week", 0, 7, _DAYS),
)


class Cron(NamedTuple):
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day of month is "*...": only the weekday restricts (Vixie's rule)
    any_weekday: bool


# What an expression may hold: ASCII digits and letters (month and weekday names), the
# operators, and spaces or tabs between fields. str.isdigit and str.split would take
# other scripts' digits ("٣") and any Unicode space (a no-break space) as well.
_ALLOWED = re.compile(r"[0-9A-Za-z*,/ \t-]*")
_SEPARATOR = re.compile(r"[ \t]+")
_NUMBER = re.compile(r"[0-9]{1,4}")  # leading zeros allowed; never a 4,300-digit int()


def _value(text: str, field: _Field) -> int:
    value = int(text) if _NUMBER.fullmatch(text) else field.names.get(text.upper())
    if value is None or not field.low <= value <= field.high:
        raise CronError(f"{field.name}: {text!r} is not in {field.low}-{field.high}")
    return value


def _step(part: str, step_text: str, field: _Field) -> int:
    """A step (the ``/n`` of a part): from 1 to the width of the field's range."""
    width = field.high - field.low + 1
    if not _NUMBER.fullmatch(step_text) or not 1 <= int(step_text) <= width:
        raise CronError(f"{field.name}: the step in {part!r} must be a number from 1 to {width}")
    return int(step_text)


def _parse_field(text: str, field: _Field) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        spec, slash, step_text = part.partition("/")
        step = _step(part, step_text, field) if slash else 1
        if spec == "*":
            low, high = field.low, field.high
        elif "-" in spec:
            first, _, last = spec.partition("-")
            low, high = _value(first, field), _value(last, field)
            if low > high:
                raise CronError(f"{field.name}: range {spec!r} runs backwards")
        else:
            low = _value(spec, field)
            high = field.high if step_text else low  # "5/15": from 5 to the end, every 15
        out.update(range(low, high + 1, step))
    return out


PARSED_CACHE = 4_096  # distinct expressions kept parsed (bounded: memory must not grow)


@functools.lru_cache(maxsize=PARSED_CACHE)
def parse(expr: str) -> Cron:
    """Parse ``minute hour day-of-month month day-of-week``; CronError says what is wrong."""
    if not _ALLOWED.fullmatch(expr):
        bad = next(c for c in expr if not _ALLOWED.fullmatch(c))
        raise CronError(
            f"{bad!r} is not allowed: use ASCII digits, month and weekday names, * , - / "
            "and spaces between the fields"
        )
    stripped = expr.strip(" \t")
    parts = _SEPARATOR.split(stripped) if stripped else []
    if len(parts) != len(_FIELDS):
        raise CronError(f"expected 5 fields (minute hour day month weekday), got {len(parts)}")
    minutes, hours, days, months, weekdays = (
        _parse_field(p, f) for p, f in zip(parts, _FIELDS, strict=True)
    )
    if 7 in weekdays:
        weekdays = (weekdays - {7}) | {0}
    return Cron(
        tuple(sorted(minutes)),
        tuple(sorted(hours)),
        frozenset(days),
        frozenset(months),
        frozenset(weekdays),
        parts[2].startswith("*"),
        parts[4].startswith("*"),
    )


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # OSError: a name of the tz database's directories ("Europe") or an over-long one
        raise CronError(f"unknown time zone {name!r}") from None


def _day_matches(cron: Cron, day: dt.date) -> bool:
    if day.month not in cron.months:
        return False
    in_month = day.day in cron.days
    in_week = (day.isoweekday() % 7) in cron.weekdays
    if cron.any_day or cron.any_weekday:
        return in_month and in_week
    return in_month or in_week  # both restricted: either one (Vixie cron)


def _instant_ms(cron_day: dt.date, hour: int, minute: int, tz: ZoneInfo) -> int | None:
    """The instant of a local wall-clock minute (its first occurrence), None if the zone
    skips it."""
    local = dt.datetime(cron_day.year, cron_day.month, cron_day.day, hour, minute, tzinfo=tz)
    utc = local.astimezone(_UTC)
    if utc.astimezone(tz).replace(tzinfo=None) != local.replace(tzinfo=None):
        return None  # a spring-forward gap
    return int(utc.timestamp()) * 1000


def next_after(cron: Cron, tz: ZoneInfo, after_ms: int) -> int | None:
    """The first fire strictly after ``after_ms``; None if none within SEARCH_DAYS."""
    start = dt.datetime.fromtimestamp(after_ms / 1000, tz)
    first_day = start.date()
    for offset in range(SEARCH_DAYS):
        day = first_day + dt.timedelta(days=offset)
        if not _day_matches(cron, day):
            continue
        hours = cron.hours
        if offset == 0:  # the hour before the start's too: a fall-back may repeat it
            hours = hours[bisect.bisect_left(hours, start.hour - 1) :]
        for hour in hours:
            minutes = cron.minutes
            if offset == 0 and hour == start.hour and not start.fold:
                minutes = minutes[bisect.bisect_left(minutes, start.minute) :]
            for minute in minutes:
                at = _instant_ms(day, hour, minute, tz)
                if at is not None and at > after_ms:
                    return at
    return None
