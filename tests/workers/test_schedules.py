"""Recurring schedules on the engine with the fake clock: each fire one message, the next
armed in the same batch; daylight-saving changes in two zones; one catch-up fire after
an outage; replace and delete."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from storage import keys
from storage.errors import ScheduleNotFound
from storage.records import MessageRecord
from storage.store import CF, Put
from tests.workers.conftest import EngineFactory
from tests.workers.support import record, run, stop_within, timer_keys, topic_log, wait_until
from workers.clock import FakeClock
from workers.engine import Engine
from workers.ops import schedules
from workers.timers import schedule
from workers.timers.schedule import Schedule

MINUTE = 60_000


def spec(
    *,
    cron: str | None = None,
    every_ms: int | None = None,
    tz: str = "UTC",
    body: str = "tick",
    end_at_ms: int | None = None,
) -> Schedule:
    return Schedule(cron, every_ms, tz, body, "utf8", {"k": "v"}, "T", None, end_at_ms, 0, None)


def put(engine: Engine, sid: str, s: Schedule) -> Schedule:
    return run(engine.put_schedule("t", sid, s))[1]


def fired(engine: Engine) -> list[MessageRecord]:
    return topic_log(engine.store, "t")


def step_to_next_fire(engine: Engine, clock: FakeClock, sid: str) -> int:
    """Advance the clock to the schedule's next fire and wait for that fire's message."""
    nxt = schedules.get(engine.store, "t", sid).next_fire_at_ms
    assert nxt is not None
    count = len(fired(engine))
    clock.set(nxt)
    wait_until(lambda: len(fired(engine)) > count, what=f"the fire at {nxt}")
    return nxt


def test_every_ms_fires_one_message_each_and_arms_the_next(
    engine: Engine, clock: FakeClock
) -> None:
    start = clock.now_ms()
    stored = put(engine, "s", spec(every_ms=10_000))
    assert stored.next_fire_at_ms == start + 10_000
    for i in range(1, 4):
        assert step_to_next_fire(engine, clock, "s") == start + i * 10_000
    got = fired(engine)
    assert [r.msg_id for r in got] == [f"s:{start + i * 10_000}" for i in range(1, 4)]
    assert all(r.properties == {"k": "v", "schedule_id": "s"} for r in got)
    assert all((r.tag, r.body, r.deliver_at_ms) == ("T", b"tick", r.delivered_at_ms) for r in got)
    now = schedules.get(engine.store, "t", "s")
    assert (now.last_fire_at_ms, now.next_fire_at_ms) == (start + 30_000, start + 40_000)
    assert len(timer_keys(engine.store)) == 1  # only the next fire


def test_a_replace_keeps_the_phase_and_a_delete_stops_it(engine: Engine, clock: FakeClock) -> None:
    start = clock.now_ms()
    put(engine, "s", spec(every_ms=10_000))
    clock.advance(4_000)
    replaced = put(engine, "s", spec(every_ms=10_000, body="tock"))
    assert replaced.next_fire_at_ms == start + 10_000
    assert replaced.created_at_ms == start
    step_to_next_fire(engine, clock, "s")
    assert fired(engine)[-1].body == b"tock"
    gone = run(engine.delete_schedule("t", "s"))
    assert gone.last_fire_at_ms == start + 10_000
    clock.advance(60_000)
    assert timer_keys(engine.store) == []
    assert len(fired(engine)) == 1
    with pytest.raises(ScheduleNotFound):
        run(engine.delete_schedule("t", "s"))
    with pytest.raises(ScheduleNotFound):
        schedules.get(engine.store, "t", "s")


def test_schedules_due_in_one_span_fire_together_once_each(
    engine: Engine, clock: FakeClock
) -> None:
    # 300 schedules due within 300 ms, a message timer among them, and one fire whose
    # msg_id a producer already used: one span, fired in runs of one kind (move.py).
    start = clock.now_ms() + 1_000
    for i in range(300):
        s = spec(every_ms=MINUTE)._replace(start_at_ms=start + i)
        put(engine, f"s{i:03d}", s)
    run(engine.send(record("t", "plain", start + 150)))
    run(engine.send(record("t", "s007:" + str(start + 7), start + 30 * MINUTE)))
    clock.set(start + 299)
    want = {f"s{i:03d}:{start + i}" for i in range(300) if i != 7} | {"plain"}
    wait_until(lambda: {r.msg_id for r in fired(engine)} == want, what="every fire")
    got = fired(engine)
    assert len(got) == len(want), "each once"
    assert all(r.delivered_at_ms == start + 299 for r in got)
    for i in (0, 7, 150, 299):
        now = schedules.get(engine.store, "t", f"s{i:03d}")
        assert (now.last_fire_at_ms, now.next_fire_at_ms) == (start + i, start + i + MINUTE)
    assert len(timer_keys(engine.store)) == 300 + 1  # the next fires, and s007:... pending


def test_end_at_stops_the_fires(engine: Engine, clock: FakeClock) -> None:
    start = clock.now_ms()
    put(engine, "s", spec(every_ms=1_000, end_at_ms=start + 2_000))
    step_to_next_fire(engine, clock, "s")
    step_to_next_fire(engine, clock, "s")
    assert schedules.get(engine.store, "t", "s").next_fire_at_ms is None
    assert timer_keys(engine.store) == []


@pytest.mark.parametrize(
    ("tz", "expr", "start", "expected"),
    [
        # Spring forward: 02:30 does not exist on the change day, so that day has no fire.
        ("America/New_York", "30 2 * * *", (2026, 3, 6, 12), ["03-07 02:30", "03-09 02:30"]),
        ("Europe/Berlin", "30 2 * * *", (2026, 3, 27, 12), ["03-28 02:30", "03-30 02:30"]),
        # Fall back: the repeated time fires once, at its first occurrence.
        ("America/New_York", "30 1 * * *", (2026, 10, 31, 12), ["11-01 01:30", "11-02 01:30"]),
        ("Europe/Berlin", "30 2 * * *", (2026, 10, 24, 12), ["10-25 02:30", "10-26 02:30"]),
    ],
)
def test_cron_across_a_daylight_saving_change(
    engine: Engine,
    clock: FakeClock,
    tz: str,
    expr: str,
    start: tuple[int, int, int, int],
    expected: list[str],
) -> None:
    zone = ZoneInfo(tz)
    year, month, day, hour = start
    clock.set(int(dt.datetime(year, month, day, hour, tzinfo=zone).timestamp()) * 1000)
    put(engine, "d", spec(cron=expr, tz=tz))
    times = [step_to_next_fire(engine, clock, "d") for _ in expected]
    local = [dt.datetime.fromtimestamp(t / 1000, zone).strftime("%m-%d %H:%M") for t in times]
    assert local == expected
    assert [r.msg_id for r in fired(engine)] == [f"d:{t}" for t in times]
    # Between fires nothing else came: one message per fire, none for the skipped day.
    assert len(fired(engine)) == len(expected)


def test_a_three_hour_outage_gives_one_catch_up_fire(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    first = make_engine()
    first.start()
    start = clock.now_ms()
    put(first, "m", spec(cron="* * * * *"))
    step_to_next_fire(first, clock, "m")
    before = len(fired(first))
    stop_within(first)
    clock.advance(3 * 60 * MINUTE)  # down for three hours: 180 fires missed
    second = make_engine()
    second.start()
    wait_until(lambda: len(fired(second)) == before + 1, what="the catch-up fire")
    latest = (clock.now_ms() // MINUTE) * MINUTE
    assert fired(second)[-1].msg_id == f"m:{latest}"
    assert fired(second)[-1].delivered_at_ms == clock.now_ms()
    assert schedules.get(second.store, "t", "m").next_fire_at_ms == latest + MINUTE
    step_to_next_fire(second, clock, "m")
    assert [r.msg_id for r in fired(second)][-2:] == [f"m:{latest}", f"m:{latest + MINUTE}"]
    assert len(fired(second)) == before + 2
    assert start < latest


def test_catch_up_walks_a_bounded_window() -> None:
    s = spec(cron="*/5 * * * *")
    assert schedule.latest_due(s, 0, 365 * 24 * 60 * MINUTE + 7 * MINUTE) == (
        365 * 24 * 60 * MINUTE + 5 * MINUTE
    )
    monthly = spec(cron="0 0 1 * *")
    assert schedule.latest_due(monthly, 0, 100 * 24 * 60 * MINUTE) == int(
        dt.datetime(1970, 4, 1, tzinfo=dt.UTC).timestamp() * 1000
    )


def _stored_then_due(engine: Engine, clock: FakeClock, s: Schedule, due: int) -> None:
    """``s`` written straight into the store with its timer at ``due`` (as an older build,
    or damage, left it), the engine started, a message sent for just after, and the clock
    set past both."""
    engine.store.write(
        [
            Put(CF.META, keys.schedule_key("t", "s"), schedule.encode(s)),
            Put(CF.TIMERS, schedule.timer_key(due, "t", "s"), b""),
        ],
        sync=True,
    )
    engine.start()
    run(engine.send(record("t", "after", due + 10)))
    clock.set(due + 10)


@pytest.mark.parametrize(
    ("stored", "why"),
    [
        # A zone validated on the way in may be stored by an older version, or be gone
        # from a newer tz database; "Europe" is a directory of it (IsADirectoryError).
        (spec(cron="* * * * *", tz="Europe"), "unknown time zone"),
        (spec(cron="* * * * *", tz="Mars/Olympus"), "unknown time zone"),
        (spec(cron="not cron"), "expected 5 fields"),
        # The next fire past the last timer key, and past the year 9999.
        (spec(every_ms=2**64 - 1)._replace(created_at_ms=10), "past every key"),
        (spec(cron="* * * * *")._replace(end_at_ms=None, start_at_ms=None), None),
    ],
)
def test_a_stored_schedule_that_cannot_fire_again_stops_alone(
    make_engine: EngineFactory,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    stored: Schedule,
    why: str | None,
) -> None:
    """Validated on the way in, tolerated on the way out: a stored schedule whose next
    fire cannot be computed fires what is due, logs why, and stops (next_fire_at_ms null);
    the move that fires it does not fail (the deliverer's thread ended on it), and the
    messages due after it are delivered."""
    due = clock.now_ms() + 1_000
    engine = make_engine()
    s = stored._replace(next_fire_at_ms=due)
    _stored_then_due(engine, clock, s, due)
    wait_until(lambda: len(fired(engine)) == 2, what="the fire and the message after it")
    assert [r.msg_id for r in fired(engine)] == [f"s:{due}", "after"]
    now = schedules.get(engine.store, "t", "s")
    assert now.last_fire_at_ms == due
    if why is None:  # the control: a good schedule arms its next fire
        assert now.next_fire_at_ms == due - due % MINUTE + MINUTE
    else:
        assert now.next_fire_at_ms is None
        assert any(why in r.getMessage() for r in caplog.records), caplog.text
    assert engine.healthy


def test_a_stored_body_that_is_not_base64_stops_its_schedule(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    due = clock.now_ms() + 1_000
    engine = make_engine()
    s = spec(every_ms=MINUTE)._replace(body="a", body_encoding="base64", next_fire_at_ms=due)
    _stored_then_due(engine, clock, s, due)
    wait_until(lambda: len(fired(engine)) == 1, what="the message after the schedule")
    assert [r.msg_id for r in fired(engine)] == ["after"]
    assert schedules.get(engine.store, "t", "s").next_fire_at_ms is None
    assert engine.healthy
