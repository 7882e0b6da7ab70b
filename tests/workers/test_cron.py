"""The cron evaluator (workers/rules/cron.py): parsing, and next fires in a time zone across
daylight-saving changes, checked against a minute-by-minute walk."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.storage.strategies import relaxed
from workers.rules import cron


def at(tz: ZoneInfo, year: int, month: int, day: int) -> int:
    return int(dt.datetime(year, month, day, tzinfo=tz).timestamp()) * 1000


def fires(expr: str, tz_name: str, start: dt.datetime, n: int) -> list[str]:
    tz = ZoneInfo(tz_name)
    c, t, out = cron.parse(expr), int(start.replace(tzinfo=tz).timestamp() * 1000), []
    for _ in range(n):
        nxt = cron.next_after(c, tz, t)
        assert nxt is not None
        out.append(dt.datetime.fromtimestamp(nxt / 1000, tz).isoformat())
        t = nxt
    return out


@pytest.mark.parametrize(("tz", "spring_day"), [("America/New_York", 8), ("Europe/Berlin", 29)])
def test_a_skipped_local_time_does_not_fire(tz: str, spring_day: int) -> None:
    got = fires("30 2 * * *", tz, dt.datetime(2026, 3, spring_day - 1), 2)
    assert [g[:10] for g in got] == [
        f"2026-03-{spring_day - 1:02d}",
        f"2026-03-{spring_day + 1:02d}",
    ]


@pytest.mark.parametrize(
    ("tz", "expr", "fall_day", "hour"),
    [
        ("America/New_York", "30 1 * * *", "2026-11-01", 1),
        ("Europe/Berlin", "30 2 * * *", "2026-10-25", 2),
    ],
)
def test_a_repeated_local_time_fires_once(tz: str, expr: str, fall_day: str, hour: int) -> None:
    day = dt.date.fromisoformat(fall_day)
    eve = day - dt.timedelta(1)
    got = fires(expr, tz, dt.datetime(eve.year, eve.month, eve.day, 12), 3)
    assert [g[:10] for g in got] == [str(day + dt.timedelta(i)) for i in range(3)]
    assert got[0][11:19] == f"{hour:02d}:30:00"


def test_every_twenty_minutes_through_a_fall_back_fires_each_wall_time_once() -> None:
    got = fires("*/20 * * * *", "America/New_York", dt.datetime(2026, 11, 1, 0, 30), 8)
    assert [g[11:16] for g in got] == [
        "00:40",
        "01:00",
        "01:20",
        "01:40",
        "02:00",
        "02:20",
        "02:40",
        "03:00",
    ]


def test_names_steps_lists_and_either_day_rule() -> None:
    c = cron.parse("0 9 1,15 * mon")  # Vixie: the 1st, the 15th, or any Monday
    utc = ZoneInfo("UTC")
    t, days = at(utc, 2026, 6, 1), []
    for _ in range(6):
        t = cron.next_after(c, utc, t) or 0
        days.append(dt.datetime.fromtimestamp(t / 1000, utc).day)
    assert days == [1, 8, 15, 22, 29, 1]  # Mondays in June 2026, then July 1st
    assert cron.parse("*/15 0 * JAN-mar SUN").months == frozenset({1, 2, 3})
    assert cron.parse("5/20 * * * 7").minutes == (5, 25, 45)
    assert cron.parse("* * * * 7").weekdays == frozenset({0})


@pytest.mark.parametrize(
    ("expr", "part"),
    [
        ("* * * *", "5 fields"),
        ("60 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day of month"),
        ("* * * 13 *", "month"),
        ("* * * * 8", "day of week"),
        ("*/0 * * * *", "step"),
        ("5-1 * * * *", "backwards"),
        ("* * * FOO *", "month"),
        ("a b c d e", "minute"),
        # Only ASCII digits and spaces: str.isdigit and str.split take other scripts'
        # digits and any Unicode space, and int() then reads "٣" as 3.
        ("\u0663 * * * *", "not allowed"),
        ("* * * * \uff11", "not allowed"),
        ("0\u00a00 * * *", "not allowed"),
        ("0 0\n* * *", "not allowed"),
        ("0\u20030 * * *", "not allowed"),
        # A step is 1 .. the width of its field, never an int() of thousands of digits.
        ("*/99999999999999999999 * * * *", "minute: the step .* from 1 to 60"),
        ("*/" + "9" * 250 + " * * * *", "minute: the step"),
        ("* */25 * * *", "hour: the step .* from 1 to 24"),
        ("1/ * * * *", "step"),
        ("9" * 250 + " * * * *", "minute"),
        ("", "5 fields"),
    ],
)
def test_malformed_expressions_name_the_part(expr: str, part: str) -> None:
    with pytest.raises(cron.CronError, match=part):
        cron.parse(expr)


def test_spaces_tabs_and_leading_zeros_are_still_cron() -> None:
    parsed = cron.parse(" 05\t*/12  * * MON ")
    assert (parsed.minutes, parsed.hours, parsed.weekdays) == ((5,), (0, 12), frozenset({1}))
    assert cron.parse("*/60 * * * *").minutes == (0,)


@pytest.mark.parametrize(
    "name", ["Mars/Olympus", "Europe", "America", "Asia", "__pycache__", "a" * 300, "Europe/"]
)
def test_unknown_zone(name: str) -> None:
    """A directory of the tz database ("Europe") is no zone: ZoneInfo raises
    IsADirectoryError for it, which is a CronError here like any unknown name."""
    with pytest.raises(cron.CronError, match="time zone"):
        cron.zone(name)


def test_a_date_that_never_comes_never_fires() -> None:
    assert cron.next_after(cron.parse("0 0 30 2 *"), ZoneInfo("UTC"), 0) is None


def walk(c: cron.Cron, tz: ZoneInfo, after_ms: int) -> int:
    """The brute-force answer: every UTC minute after ``after_ms``, the first whose local
    wall time matches and is that wall time's first occurrence."""
    t = (after_ms // 60_000 + 1) * 60_000
    while True:
        local = dt.datetime.fromtimestamp(t / 1000, tz)
        first = local.fold == 0
        day_ok = local.month in c.months and (
            (local.day in c.days and (local.isoweekday() % 7) in c.weekdays)
            if c.any_day or c.any_weekday
            else (local.day in c.days or (local.isoweekday() % 7) in c.weekdays)
        )
        if first and day_ok and local.hour in c.hours and local.minute in c.minutes:
            return t
        t += 60_000


@relaxed
@given(
    expr=st.sampled_from(["*/7 * * * *", "30 1,2,3 * * *", "0 */5 * * 1-5", "15 2 * 3,10,11 *"]),
    tz=st.sampled_from(["America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "UTC"]),
    start=st.integers(at(ZoneInfo("UTC"), 2026, 3, 1), at(ZoneInfo("UTC"), 2026, 11, 10)),
)
def test_next_after_matches_a_minute_by_minute_walk(expr: str, tz: str, start: int) -> None:
    c, zone = cron.parse(expr), ZoneInfo(tz)
    assert cron.next_after(c, zone, start) == walk(c, zone, start)
