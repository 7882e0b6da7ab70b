"""Restart needs no replay (invariant 3): timers on disk are simply due; the watermark only
saves a walk over reclaimed keys. A crash mid-delivery leaves each message in exactly one
place (invariant 2)."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from storage import keys
from storage.records import MessageState, decode_index
from storage.store import CF, Delete, RocksStore
from tests.workers.conftest import EngineFactory
from tests.workers.support import (
    WAIT_S,
    record,
    run,
    start_parts,
    stop_within,
    timer_keys,
    topic_log,
    wait_until,
)
from workers.clock import FakeClock
from workers.engine import Engine, EngineConfig
from workers.timers import message

REPO = Path(__file__).resolve().parents[2]


def settled(engine: Engine) -> bool:
    return engine.writer.pending_timers == 0 and not timer_keys(engine.store)


def test_restart_delivers_what_is_left_exactly_once_from_the_watermark(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    start = clock.now_ms()
    first = make_engine()
    first.start()
    for i in range(3):
        run(first.send(record("t", f"early{i}", start + 100)))
    for i in range(7):
        run(first.send(record("t", f"late{i}", start + 1_000 + i)))
    clock.advance(100)
    wait_until(lambda: first.deliverer.moved == 3, what="the early ones")
    first.stop()

    second = make_engine()
    watermark = second.store.get(CF.META, keys.WATERMARK_KEY)
    assert watermark == keys.successor(message.timer_key(start + 100, "t", "early2"))
    assert second.scanner.cursor == watermark  # the scan resumes past the reclaimed span
    assert second.writer.pending_timers == 7  # the gauge survives too
    second.start()
    clock.advance(906)
    wait_until(lambda: second.deliverer.moved == 7, what="the late ones")
    wait_until(lambda: settled(second), what="no timers left")
    log = [e.msg_id for e in topic_log(second.store, "t")]
    assert log == [f"early{i}" for i in range(3)] + [f"late{i}" for i in range(7)]
    assert second.deliverer.moved == 7


def test_a_lost_watermark_costs_a_scan_not_a_message(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    start = clock.now_ms()
    first = make_engine()
    first.start()
    run(first.send(record("t", "a", start + 10)))
    run(first.send(record("t", "b", start + 20)))
    clock.advance(10)
    wait_until(lambda: first.deliverer.moved == 1, what="a's delivery")
    first.stop()
    store = RocksStore(first.config.data_dir)
    store.write([Delete(CF.META, keys.WATERMARK_KEY)], sync=True)
    store.close()

    second = make_engine()
    assert second.scanner.cursor == b""
    second.start()
    clock.advance(10)
    wait_until(lambda: second.deliverer.moved == 1, what="b's delivery")
    wait_until(lambda: settled(second), what="no timers left")
    assert [e.msg_id for e in topic_log(second.store, "t")] == ["a", "b"]


def test_keys_scanned_but_not_moved_before_stop_are_delivered_after_restart(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    start = clock.now_ms()
    first = make_engine()
    start_parts(first, scanner=True, deliverer=False)
    for i in range(3):
        run(first.send(record("t", f"m{i}", start + 10)))
    clock.advance(10)
    wait_until(lambda: first.put_queue.qsize() == 1, what="the scanner's hand-over")
    first.stop()  # the chunk in the put queue is dropped; its keys are still timers

    second = make_engine()
    assert second.scanner.cursor == b""
    assert second.writer.pending_timers == 3
    second.start()
    wait_until(lambda: second.deliverer.moved == 3, what="delivery after restart")
    wait_until(lambda: settled(second), what="no timers left")
    assert [e.msg_id for e in topic_log(second.store, "t")] == ["m0", "m1", "m2"]


CRASHING_CHILD = """
import asyncio, os, sys, time
from storage.records import MessageRecord
from workers.clock import FakeClock
from workers.engine import Engine, EngineConfig

data_dir, start, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
clock = FakeClock(start)
engine = Engine(EngineConfig(data_dir=data_dir, scan_chunk=100), clock)
engine.start()
recs = [
    MessageRecord(f"t{i % 3}", f"m{i}", start + 1 + i % 1000, 0, b"x") for i in range(n)
]

async def send_all():
    for i in range(0, n, 1000):
        await engine.send_batch(recs[i : i + 1000])

asyncio.run(send_all())
clock.advance(1000)
deadline = time.monotonic() + 30
while engine.deliverer.moved < n // 3 and time.monotonic() < deadline:
    time.sleep(0.0005)
print(engine.deliverer.moved, flush=True)
os._exit(0)  # no stop, no close, no flush: a crash in the middle of delivery
"""


def test_a_crash_mid_delivery_leaves_each_message_in_exactly_one_place(
    make_engine: EngineFactory, clock: FakeClock, data_dir: str
) -> None:
    n = 6_000
    start = clock.now_ms()
    child = subprocess.run(
        [sys.executable, "-c", CRASHING_CHILD, data_dir, str(start), str(n)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=WAIT_S * 6,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    moved_before_crash = int(child.stdout)
    assert moved_before_crash >= n // 3

    store = RocksStore(data_dir)
    try:
        states: Counter[MessageState] = Counter()
        logs = {f"t{t}": topic_log(store, f"t{t}") for t in range(3)}
        timers = set(timer_keys(store))
        for i in range(n):
            topic, msg_id, due = f"t{i % 3}", f"m{i}", start + 1 + i % 1000
            raw = store.get(CF.MESSAGES, keys.message_key(topic, msg_id))
            assert raw is not None  # every send was acknowledged, so it is on disk
            entry = decode_index(raw)
            states[entry.state] += 1
            in_timers = message.timer_key(due, topic, msg_id) in timers
            if entry.state is MessageState.SCHEDULED:
                assert in_timers
            else:
                assert entry.state is MessageState.DELIVERED
                assert not in_timers
                assert logs[topic][entry.seq].msg_id == msg_id
        assert sum(len(log) for log in logs.values()) == states[MessageState.DELIVERED]
        assert len(timers) == states[MessageState.SCHEDULED]
        assert store.get(CF.META, keys.PENDING_KEY) == keys.u64(states[MessageState.SCHEDULED])
        assert states[MessageState.DELIVERED] >= moved_before_crash
    finally:
        store.close()

    clock.advance(1_000)  # where the child's clock was when it crashed
    engine = make_engine()
    engine.start()
    wait_until(lambda: settled(engine), what="the rest delivered after the crash")
    for t in range(3):
        ids = [e.msg_id for e in topic_log(engine.store, f"t{t}")]
        assert sorted(ids) == sorted(f"m{i}" for i in range(t, n, 3))  # each exactly once


def test_a_clock_stepped_back_across_a_restart_still_delivers_what_falls_due(
    make_engine: EngineFactory, clock: FakeClock, data_dir: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 10.1: deliver at T, restart with the clock at T - 10 s, send one due at
    T - 5 s: it is delivered once the clock passes it, whatever the watermark says."""
    first = make_engine()
    first.start()
    due = clock.now_ms() + 1_000
    run(first.send(record("t", "before", due)))
    clock.advance(1_000)
    wait_until(lambda: first.deliverer.moved == 1, what="the first delivery")
    first.stop()

    behind = FakeClock(due - 10_000)
    with caplog.at_level(logging.WARNING, logger="rocktimer.scanner"):
        second = Engine(EngineConfig(data_dir=data_dir), behind)
    assert any("10000 ms behind" in r.getMessage() for r in caplog.records)
    second.start()
    try:
        run(second.send(record("t", "after", due - 5_000)))
        behind.advance(6_000)
        wait_until(lambda: second.deliverer.moved == 1, what="the message sent after the step")
        assert second.status("t", "after").entry.state is MessageState.DELIVERED
    finally:
        stop_within(second)


def test_the_listing_after_a_restart_behind_the_watermark_shows_every_scheduled_message(
    make_engine: EngineFactory, clock: FakeClock, data_dir: str
) -> None:
    """Deliver at T (the watermark is then past T), restart with the clock an hour behind,
    send two due in a few seconds (below the watermark): the scheduled listing shows them
    with the ones still due after T, in due order (it started at the watermark: empty)."""
    first = make_engine()
    first.start()
    due = clock.now_ms() + 1_000
    run(first.send(record("t", "before", due)))
    run(first.send(record("t", "later", due + 60_000)))
    clock.advance(1_000)
    wait_until(lambda: first.deliverer.moved == 1, what="the first delivery")
    first.stop()

    behind = FakeClock(due - 3_600_000)
    second = Engine(EngineConfig(data_dir=data_dir), behind)
    second.start()
    try:
        for i in range(2):
            run(second.send(record("t", f"after{i}", behind.now_ms() + 5_000 + i)))
        listed, resume = second.scheduled("t", None, 100)
        assert [r.msg_id for r in listed] == ["after0", "after1", "later"]
        assert resume is None
        behind.advance(5_001)
        wait_until(lambda: second.deliverer.moved == 2, what="the two sent after the step")
        listed, _ = second.scheduled("t", None, 100)
        assert [r.msg_id for r in listed] == ["later"]
    finally:
        stop_within(second)
