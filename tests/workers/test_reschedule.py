"""Reschedule (api.md v1 additions): one atomic batch moves a scheduled message's timer;
it is delivered once, at the new time. Every state, and the race with its own delivery."""

from __future__ import annotations

import asyncio

import pytest

from storage import keys
from storage.errors import MessageConflict, MessageNotFound
from storage.records import MessageState
from storage.store import CF
from storage.txn import Txn
from tests.workers.support import (
    TIMER_END,
    RecordingStore,
    call,
    record,
    run,
    timer_keys,
    topic_log,
    wait_until,
)
from workers.clock import FakeClock
from workers.engine import Engine
from workers.ops import messages
from workers.ops.move import move_due
from workers.timers import message
from workers.writer import Writer


def send(engine: Engine, msg_id: str, due: int) -> None:
    run(engine.send(record("t", msg_id, due)))


def reschedule(engine: Engine, msg_id: str, due: int) -> messages.SendOutcome:
    return run(engine.reschedule("t", msg_id, due))


def delivered(engine: Engine) -> list[tuple[str, int, int]]:
    """(msg_id, deliver_at_ms, delivered_at_ms) of the topic log, in order."""
    return [(r.msg_id, r.deliver_at_ms, r.delivered_at_ms) for r in topic_log(engine.store, "t")]


def test_a_later_time_delivers_then_and_only_then(engine: Engine, clock: FakeClock) -> None:
    start = clock.now_ms()
    send(engine, "m", start + 100)
    out = reschedule(engine, "m", start + 500)
    assert (out.state, out.deliver_at_ms) == (MessageState.SCHEDULED, start + 500)
    assert engine.status("t", "m").entry.due_ms == start + 500
    assert timer_keys(engine.store) == [message.timer_key(start + 500, "t", "m")]
    assert engine.writer.pending_timers == 1
    clock.advance(100)
    assert engine.status("t", "m").entry.state is MessageState.SCHEDULED
    clock.advance(400)
    wait_until(lambda: engine.writer.pending_timers == 0, what="delivery at the new time")
    assert delivered(engine) == [("m", start + 500, start + 500)]
    status = engine.status("t", "m")
    assert status.record is not None
    assert status.record.deliver_at_ms == start + 500


def test_an_earlier_time_delivers_earlier(engine: Engine, clock: FakeClock) -> None:
    start = clock.now_ms()
    send(engine, "m", start + 10_000)
    reschedule(engine, "m", start + 20)
    clock.advance(20)
    wait_until(lambda: engine.writer.pending_timers == 0, what="delivery at the new time")
    assert delivered(engine) == [("m", start + 20, start + 20)]
    assert timer_keys(engine.store) == []


def test_a_past_time_delivers_at_once(engine: Engine, clock: FakeClock) -> None:
    now = clock.now_ms()
    send(engine, "m", now + 10_000)
    out = reschedule(engine, "m", now - 5)
    assert out.state is MessageState.DELIVERED
    assert delivered(engine) == [("m", now - 5, now)]
    assert timer_keys(engine.store) == []
    assert engine.writer.pending_timers == 0


def test_delivered_cancelled_and_unknown_are_refused(engine: Engine, clock: FakeClock) -> None:
    now = clock.now_ms()
    send(engine, "done", now)
    send(engine, "gone", now + 1_000)
    run(engine.cancel("t", "gone"))
    with pytest.raises(MessageConflict, match="delivered"):
        reschedule(engine, "done", now + 5_000)
    with pytest.raises(MessageConflict, match="cancelled"):
        reschedule(engine, "gone", now + 5_000)
    with pytest.raises(MessageNotFound):
        reschedule(engine, "nobody", now + 5_000)
    with pytest.raises(MessageNotFound):
        run(engine.reschedule("other-topic", "done", now + 5_000))
    assert timer_keys(engine.store) == []
    assert delivered(engine) == [("done", now, now)]


@pytest.mark.parametrize("order", ["move-first", "reschedule-first", "one-batch"])
def test_a_reschedule_racing_a_scanned_key(
    writer: Writer, store: RecordingStore, clock: FakeClock, order: str
) -> None:
    """The old key sits in the put queue (scanned, not moved yet) when the reschedule
    comes: 200 and delivered at the new time only, or 409 and delivered at the old."""
    due = clock.now_ms() + 10
    call(writer, lambda txn: messages.send(txn, record("t", "m", due)), durable=True)
    clock.advance(10)
    scanned = store.scan(CF.TIMERS, b"", TIMER_END, 10)
    mark = writer.cancels_committed
    later = clock.now_ms() + 1_000

    def both(txn: Txn) -> int:  # the two ops in one batch: the move reads the staged index
        messages.reschedule(txn, "t", "m", later)
        return move_due(txn, scanned, mark)

    if order == "move-first":
        call(writer, lambda txn: move_due(txn, scanned, mark), durable=False)
        with pytest.raises(MessageConflict):
            call(writer, lambda txn: messages.reschedule(txn, "t", "m", later), durable=True)
        expected = [("m", due)]
    else:
        if order == "one-batch":
            assert call(writer, both, durable=True) == 0
        else:
            call(writer, lambda txn: messages.reschedule(txn, "t", "m", later), durable=True)
            assert call(writer, lambda txn: move_due(txn, scanned, mark), durable=False) == 0
        assert topic_log(store, "t") == []
        clock.advance(1_000)
        assert call(writer, lambda txn: move_due(txn, scanned_all(store)), durable=False) == 1
        expected = [("m", later)]
    assert [(r.msg_id, r.deliver_at_ms) for r in topic_log(store, "t")] == expected
    assert timer_keys(store) == []
    assert writer.pending_timers == 0


def scanned_all(store: RecordingStore) -> list[tuple[bytes, bytes]]:
    return store.scan(CF.TIMERS, b"", TIMER_END, 10_000)


RACES = 2_000


def test_reschedule_races_its_own_delivery_thousands_of_times(
    engine: Engine, clock: FakeClock
) -> None:
    """Each message falls due as its reschedule is sent, with the scanner and deliverer
    running: each ends delivered exactly once, at the new time if the reschedule said
    200, at the old one if it said 409."""

    async def race() -> dict[str, int]:
        expected: dict[str, int] = {}
        for i in range(RACES):
            msg_id = f"m{i:05d}"
            due = clock.now_ms() + 1
            await engine.send(record("t", msg_id, due))
            clock.advance(1)  # due: the scanner wakes and races the reschedule below
            if i % 3:
                await asyncio.sleep(0)
            later = clock.now_ms() + 1 + i % 7
            try:
                await engine.reschedule("t", msg_id, later)
                expected[msg_id] = later
            except MessageConflict:
                expected[msg_id] = due
        return expected

    expected = run(race(), timeout=300)
    clock.advance(100)
    wait_until(lambda: engine.writer.pending_timers == 0, what="every message delivered")
    log = topic_log(engine.store, "t")
    assert sorted(r.msg_id for r in log) == sorted(expected), "each exactly once"
    for r in log:
        due = expected[r.msg_id]
        assert r.deliver_at_ms == due
        assert r.delivered_at_ms >= due, "never before its (new) time"
        entry = engine.status("t", r.msg_id).entry
        assert (entry.state, entry.due_ms) == (MessageState.DELIVERED, due)
    assert timer_keys(engine.store) == []
    index = engine.store.scan(CF.MESSAGES, b"", keys.prefix_end(b"t\x00"), RACES + 1)
    assert len(index) == RACES
