"""Delivery through the scanner and deliverer: exactly once, in due order, on time; cancel
racing delivery; the reclaimed (range-deleted) timer span."""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable

import pytest

from storage import keys
from storage.records import MessageRecord, MessageState
from storage.store import CF
from tests.workers.conftest import EngineFactory
from tests.workers.support import record, run, start_parts, timer_keys, topic_log, wait_until
from workers.clock import FakeClock
from workers.engine import Engine
from workers.ops.messages import SendOutcome
from workers.timers import message


def moved_is(engine: Engine, n: int) -> Callable[[], bool]:
    return lambda: engine.deliverer.moved == n


def send_all(engine: Engine, recs: list[MessageRecord]) -> None:
    for i in range(0, len(recs), 1_000):
        outcomes = run(engine.send_batch(recs[i : i + 1_000]))
        assert all(isinstance(o, SendOutcome) and o.created for o in outcomes)


def test_thousand_random_timers_each_delivered_once_in_due_order_on_time(
    engine: Engine, clock: FakeClock
) -> None:
    rng = random.Random(43)
    start = clock.now_ms()
    step_ms, steps = 100, 20
    topics = ["alpha", "beta", "gamma"]
    recs = [
        record(rng.choice(topics), f"m{i:04d}", start + rng.randint(1, step_ms * steps))
        for i in range(1_000)
    ]
    send_all(engine, recs)
    assert engine.writer.pending_timers == 1_000

    for _ in range(steps):
        now = clock.advance(step_ms)
        due = sum(1 for r in recs if r.deliver_at_ms <= now)
        wait_until(moved_is(engine, due), what=f"{due} deliveries")
        # Nothing due later slipped through early.
        assert engine.writer.pending_timers == 1_000 - due

    assert engine.deliverer.moved == 1_000
    assert timer_keys(engine.store) == []
    by_topic: dict[str, list[MessageRecord]] = defaultdict(list)
    for r in recs:
        by_topic[r.topic].append(r)
    for topic, sent in by_topic.items():
        log = topic_log(engine.store, topic)
        assert sorted(e.msg_id for e in log) == sorted(r.msg_id for r in sent)  # exactly once
        dues = [e.deliver_at_ms for e in log]
        assert dues == sorted(dues)  # the topic log is in due order
        got = run(engine.receive(topic, "g", 1_000, 0, 30_000))
        assert [g.record.msg_id for g in got] == [e.msg_id for e in log]  # received in log order
    for r in recs:
        status = engine.status(r.topic, r.msg_id)
        assert status.entry.state is MessageState.DELIVERED
        # Delivered at the first clock step that reached its due time: never early, never a
        # step late.
        steps_to_due = -(-(r.deliver_at_ms - start) // step_ms)
        assert status.entry.done_at_ms == start + steps_to_due * step_ms


def test_cancel_wins_over_a_due_key_already_in_the_put_queue(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = make_engine(put_queue_chunks=1)
    start_parts(engine, scanner=True, deliverer=False)  # nobody drains the put queue
    due = clock.now_ms() + 100
    for msg_id in ("a", "b", "c"):
        run(engine.send(record("t", msg_id, due)))
    clock.advance(100)
    wait_until(lambda: engine.put_queue.qsize() == 1, what="the scanner's hand-over")
    assert len(engine.put_queue.queue[0]) == 3  # the scanner picked up all three

    cancelled = run(engine.cancel("t", "b"))
    assert cancelled.cancelled_at_ms == clock.now_ms()

    engine.deliverer.start()
    wait_until(lambda: engine.deliverer.batches == 1, what="the move")
    assert engine.deliverer.moved == 2
    assert [e.msg_id for e in topic_log(engine.store, "t")] == ["a", "c"]
    assert engine.status("t", "b").entry.state is MessageState.CANCELLED
    assert timer_keys(engine.store) == []
    assert engine.writer.pending_timers == 0
    got = run(engine.receive("t", "g", 10, 0, 30_000))
    assert [g.record.msg_id for g in got] == ["a", "c"]


@pytest.mark.parametrize("early", [1, 600])  # a short span (point deletes), a long one (range)
def test_moving_a_span_never_deletes_a_key_that_was_not_moved(
    engine: Engine, clock: FakeClock, early: int
) -> None:
    start = clock.now_ms()
    early_ids = [f"a{i:04d}" for i in range(early)]
    send_all(engine, [record("t", msg_id, start + 100) for msg_id in early_ids])
    run(engine.send(record("t", "c", start + 300)))
    clock.advance(100)
    wait_until(moved_is(engine, early), what="the early ones")
    last_moved = message.timer_key(start + 100, "t", early_ids[-1])
    key_c = message.timer_key(start + 300, "t", "c")
    assert engine.store.get(CF.META, keys.WATERMARK_KEY) == keys.successor(last_moved)
    assert timer_keys(engine.store) == [key_c]

    # Scheduled after the first move, due between the moved keys and the remaining one.
    run(engine.send(record("t", "b", start + 200)))
    # And one due right now: it goes to the log, never into the timer span.
    run(engine.send(record("t", "now", start + 100)))
    assert timer_keys(engine.store) == [message.timer_key(start + 200, "t", "b"), key_c]

    clock.advance(200)
    wait_until(moved_is(engine, early + 2), what="b and c")
    assert [e.msg_id for e in topic_log(engine.store, "t")] == [*early_ids, "now", "b", "c"]
    assert engine.store.get(CF.META, keys.WATERMARK_KEY) == keys.successor(key_c)
    assert timer_keys(engine.store) == []


def test_watermark_passes_every_delivered_key_and_later_timers_still_fire(
    engine: Engine, clock: FakeClock
) -> None:
    start = clock.now_ms()
    n = 500
    recs = [record(f"t{i % 7}", f"m{i}", start + 1 + i % 50) for i in range(n)]
    send_all(engine, recs)
    clock.advance(50)
    wait_until(lambda: engine.deliverer.moved == n, what="all deliveries")
    watermark = engine.store.get(CF.META, keys.WATERMARK_KEY)
    assert watermark is not None
    assert all(message.timer_key(r.deliver_at_ms, r.topic, r.msg_id) < watermark for r in recs)
    assert engine.sweeper.sweep()  # compacts the reclaimed span once...
    assert not engine.sweeper.sweep()  # ...and not again until the watermark moves

    run(engine.send(record("t0", "late", clock.now_ms() + 10)))
    clock.advance(10)
    wait_until(lambda: engine.deliverer.moved == n + 1, what="the later timer")
    assert topic_log(engine.store, "t0")[-1].msg_id == "late"
    assert engine.store.get(CF.META, keys.WATERMARK_KEY) > watermark  # type: ignore[operator]


def test_sweeper_compacts_on_its_interval_not_on_every_clock_step(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = make_engine(sweep_interval_ms=60_000)
    engine.start()
    start = clock.now_ms()
    for i in range(5):
        run(engine.send(record("t", f"m{i}", start + 100 * (i + 1))))
    for i in range(5):
        clock.advance(100)
        wait_until(moved_is(engine, i + 1), what="a delivery")
    assert engine.sweeper.compactions == 0  # 500 ms of a 60 s interval
    clock.advance(60_000)
    wait_until(lambda: engine.sweeper.compactions == 1, what="the sweep")


def test_an_idle_engine_does_not_spin(engine: Engine, clock: FakeClock) -> None:
    # Workers wait on the clock; a wake-up that is never cleared turns a wait into a busy
    # loop that takes a core from the writer (this machine has two).
    start = clock.now_ms()
    for i in range(3):
        run(engine.send(record("t", f"m{i}", start + 10 * (i + 1))))
    for i in range(3):
        clock.advance(10)
        wait_until(moved_is(engine, i + 1), what="a delivery")
    clock.settle()
    # Counted, not timed: an idle worker is one wait that blocks, a spinning one begins a
    # wait again and again (thousands in this window even on a machine kept busy), so the
    # count does not depend on how much CPU the machine gives this process.
    waits, scans = clock.waits, engine.scanner.scans
    time.sleep(0.5)
    assert clock.waits - waits <= 3, f"{clock.waits - waits} waits begun while idle"
    assert engine.scanner.scans == scans


def test_timers_due_back_to_back_are_moved_once_a_pace_and_one_after_a_quiet_spell_at_once(
    engine: Engine, clock: FakeClock
) -> None:
    """One move per MOVE_PACE_MS while timers fall due every millisecond (each move's fixed
    cost shared), never more than that late; the first after a quiet spell goes at once."""
    start = clock.now_ms()
    pace = engine.scanner.pace_ms
    assert pace == 2
    for i in range(1, 6):
        run(engine.send(record("t", f"m{i}", start + i)))
    run(engine.send(record("t", "lone", start + 100)))

    clock.advance(1)
    wait_until(moved_is(engine, 1), what="the first, at once")
    clock.settle()  # the move's round is over: the scanner waits out the pace
    scans = engine.scanner.scans
    clock.advance(1)  # m2 is due, inside the pace
    clock.settle()  # the scanner has seen the new time and waits again: no scan made
    assert engine.scanner.scans == scans
    assert engine.deliverer.moved == 1
    # A move counts its timers, then itself: wait on the count made last (batches), so the
    # timers it moved are counted by then; a move split in two is seen at its first half.
    clock.advance(1)  # the pace is over: m2 and m3 in one move
    wait_until(lambda: engine.deliverer.batches == 2, what="the move of m2 and m3")
    assert engine.deliverer.moved == 3
    clock.advance(2)
    wait_until(lambda: engine.deliverer.batches == 3, what="the move of m4 and m5")
    assert engine.deliverer.moved == 5
    clock.set(start + 100)
    wait_until(moved_is(engine, 6), what="the lone timer")
    done = {m: engine.status("t", m).entry.done_at_ms - start for m in ("m1", "m2", "m3", "lone")}
    assert done == {"m1": 1, "m2": 3, "m3": 3, "lone": 100}
