"""The engine on the real clock: a wall clock that steps back an hour while the engine
runs, and timer keys due further off than any wait can block, written straight into
the store. Durations here are a few hundred ms of real time (the monotonic clock is the
point); every bound is generous, so a busy machine is slower, never wrong."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.keys import PENDING_KEY, u64
from storage.store import CF, Put, RocksStore
from tests.workers.support import WAIT_S, record, run, stop_within, topic_log, wait_until
from workers.clock import FakeClock, RealClock
from workers.engine import Engine, EngineConfig
from workers.timers import message, schedule

HOUR_NS = 3_600 * 10**9
DELAY_MS = 200
WAIT_MS = 300
INVISIBLE_MS = 1_000


class SteppingWall:
    """The system's wall clock, minus whatever a test stepped it back by."""

    def __init__(self) -> None:
        self.behind_ns = 0

    def __call__(self) -> int:
        return time.time_ns() - self.behind_ns


@pytest.fixture
def wall() -> SteppingWall:
    return SteppingWall()


def checked_engine(data_dir: Path, clock: RealClock) -> Iterator[Engine]:
    engine = Engine(EngineConfig(data_dir=str(data_dir)), clock)
    yield engine
    stop_within(engine)
    assert engine.scanner.error is None, engine.scanner.error
    assert engine.deliverer.error is None, engine.deliverer.error


@pytest.fixture
def stepping_engine(tmp_path: Path, wall: SteppingWall) -> Iterator[Engine]:
    """An engine on the real clock whose wall clock the test steps back."""
    yield from checked_engine(tmp_path / "db", RealClock(wall))


@pytest.fixture
def real_engine(tmp_path: Path) -> Iterator[Engine]:
    """An engine on the real clock, as the service runs."""
    yield from checked_engine(tmp_path / "db", RealClock())


def test_delays_long_polls_and_invisibility_run_in_real_time_across_a_step_back(
    stepping_engine: Engine, wall: SteppingWall
) -> None:
    """The wall clock steps back an hour while the engine runs. A send with a delay of
    200 ms is delivered 200 ms later (the held clock of old: an hour later), a long poll
    of 300 ms on an empty topic answers after 300 ms (it never answered), and a message
    received with an invisibility of 1 s is received again 1 s later."""
    engine = stepping_engine
    engine.start()
    wall.behind_ns = HOUR_NS

    sent_at = engine.clock.now_ms()
    out = run(engine.send(record("t", "m", sent_at + DELAY_MS)))
    assert out.deliver_at_ms == sent_at + DELAY_MS
    wait_until(lambda: bool(topic_log(engine.store, "t")), what="the 200 ms delay after the step")

    started = time.monotonic()
    assert run(engine.receive("empty", "g", 1, WAIT_MS, INVISIBLE_MS), timeout=WAIT_S) == []
    assert time.monotonic() - started >= (WAIT_MS - 50) / 1000

    got = run(engine.receive("t", "g", 1, 0, INVISIBLE_MS))
    assert [(g.record.msg_id, g.attempt) for g in got] == [("m", 1)]
    again = run(engine.receive("t", "g", 1, 3 * INVISIBLE_MS, INVISIBLE_MS), timeout=WAIT_S)
    assert [(g.record.msg_id, g.attempt) for g in again] == [("m", 2)]
    assert engine.healthy


@pytest.mark.parametrize("due_ms", [11_256_593_538_460, 2**53, 2**63 - 1, 2**64 - 1])
def test_a_stored_timer_due_past_any_wait_does_not_stop_delivery(
    real_engine: Engine, tmp_path: Path, due_ms: int
) -> None:
    """Timer keys due in the year 2326 and later (a message's and a schedule's, written
    straight into RocksDB) are the earliest keys when the engine starts: the scanner waits
    for them without OverflowError, and a message sent later is still delivered."""
    engine = real_engine
    engine.store.write(
        [
            Put(CF.TIMERS, message.timer_key(due_ms, "far", "m"), b""),
            Put(CF.TIMERS, schedule.timer_key(due_ms, "far", "s"), b""),
        ],
        sync=True,
    )
    engine.start()
    wait_until(lambda: engine.scanner.scans >= 1, what="the first scan")
    time.sleep(0.05)  # the scanner is in its wait for the far key now
    run(engine.send(record("t", "soon", engine.clock.now_ms() + 50)))
    wait_until(
        lambda: bool(topic_log(engine.store, "t")), what="the message sent after the far keys"
    )
    # The scanner sets its next due time after the move that made the message visible:
    # wait for it to look ahead again, past the delivered message, to the far key.
    wait_until(lambda: engine.scanner.next_due_ms == due_ms, what="the scanner back on the far key")
    assert engine.healthy


def test_restart_delivers_past_a_far_key(tmp_path: Path) -> None:
    """The same far key across a restart: a store holding it starts and delivers."""
    data = str(tmp_path / "db")
    store = RocksStore(data)
    store.write([Put(CF.TIMERS, message.timer_key(2**63 - 1, "far", "m"), b"")], sync=True)
    store.close()
    for i in range(2):
        engine = Engine(EngineConfig(data_dir=data), RealClock())
        engine.start()
        try:
            run(engine.send(record("t", f"m{i}", engine.clock.now_ms() + 20)))
            wait_until(lambda: len(topic_log(engine.store, "t")) == i + 1, what=f"m{i}")  # noqa: B023
            assert engine.healthy
        finally:
            stop_within(engine)


def test_a_pending_count_below_its_timers_does_not_stop_delivery(tmp_path: Path) -> None:
    """A store whose pending-timers count says 0 beside a message's timer key (a count and
    keys that disagree, written straight into RocksDB): the timer is still delivered when
    due, the count stays at 0 instead of going negative, and no worker thread dies."""
    data = str(tmp_path / "db")
    due = RealClock().now_ms() + 500
    config = EngineConfig(data_dir=data, events_seal_process=False)
    first = Engine(config, FakeClock(due - 60_000))  # not due on this engine's clock
    first.start()
    try:
        run(first.send(record("t", "m", due)))
        assert first.writer.pending_timers == 1
    finally:
        stop_within(first)
    store = RocksStore(data)
    store.write([Put(CF.META, PENDING_KEY, u64(0))], sync=True)
    store.close()
    engine = Engine(config, RealClock())
    engine.start()
    try:
        wait_until(lambda: len(topic_log(engine.store, "t")) == 1, what="the message delivered")
        wait_until(
            lambda: (
                engine.writer.batches > 0 and not engine.store.scan(CF.TIMERS, b"", b"\xff" * 9, 1)
            ),
            what="its timer removed",
        )
        assert engine.healthy
        assert engine.writer.pending_timers == 0
    finally:
        stop_within(engine)
    assert engine.scanner.error is None, engine.scanner.error
