"""The Engine's producer side: send, idempotency, cancel (invariants 4 and 5)."""

from __future__ import annotations

import pytest

from storage.errors import MessageConflict, MessageNotFound
from storage.records import MessageState
from tests.workers.support import record, run, timer_keys, topic_log, wait_until
from workers.clock import FakeClock
from workers.engine import Engine
from workers.ops.consume import Received
from workers.ops.messages import CancelOutcome, SendOutcome


def send(engine: Engine, topic: str, msg_id: str, due: int, body: bytes = b"b") -> SendOutcome:
    return run(engine.send(record(topic, msg_id, due, body)))


def cancel(engine: Engine, topic: str, msg_id: str) -> CancelOutcome:
    return run(engine.cancel(topic, msg_id))


def receive(engine: Engine, topic: str, group: str = "g", limit: int = 100) -> list[Received]:
    return run(engine.receive(topic, group, limit, 0, 30_000))


def settled(engine: Engine) -> bool:
    """Nothing left to deliver: no pending timer, no timer key at all."""
    return engine.writer.pending_timers == 0 and not timer_keys(engine.store)


def test_a_deliver_time_in_the_past_is_delivered_at_once(engine: Engine, clock: FakeClock) -> None:
    now = clock.now_ms()
    outcome = send(engine, "t", "m", now - 60_000, b"hello")
    assert outcome.created
    assert outcome.state is MessageState.DELIVERED
    assert outcome.deliver_at_ms == now - 60_000
    status = engine.status("t", "m")
    assert status.entry.state is MessageState.DELIVERED
    assert status.entry.done_at_ms == now
    got = receive(engine, "t")
    assert [(r.record.msg_id, r.record.body, r.attempt) for r in got] == [("m", b"hello", 1)]
    assert got[0].record.delivered_at_ms == now
    assert engine.deliverer.moved == 0  # it never was a timer
    assert engine.writer.pending_timers == 0


def test_five_due_the_same_ms_one_cancelled_four_delivered(
    engine: Engine, clock: FakeClock
) -> None:
    due = clock.now_ms() + 1_000
    for i in range(5):
        assert send(engine, "t", f"m{i}", due).state is MessageState.SCHEDULED
    assert engine.writer.pending_timers == 5
    cancel(engine, "t", "m2")
    assert engine.writer.pending_timers == 4

    clock.advance(999)
    assert receive(engine, "t") == []  # not early
    clock.advance(1)
    wait_until(lambda: engine.deliverer.moved == 4, what="four deliveries")
    wait_until(lambda: settled(engine), what="no timers left")

    got = receive(engine, "t")
    assert sorted(r.record.msg_id for r in got) == ["m0", "m1", "m3", "m4"]
    assert engine.deliverer.moved == 4
    assert len(topic_log(engine.store, "t")) == 4
    assert engine.status("t", "m2").entry.state is MessageState.CANCELLED


def test_same_msg_id_in_two_topics_are_two_messages(engine: Engine, clock: FakeClock) -> None:
    due = clock.now_ms() + 100
    assert send(engine, "a", "same", due, b"A").created
    assert send(engine, "b", "same", due, b"B").created
    cancel(engine, "a", "same")
    assert engine.status("b", "same").entry.state is MessageState.SCHEDULED

    clock.advance(100)
    wait_until(lambda: settled(engine), what="delivery")

    assert engine.status("a", "same").entry.state is MessageState.CANCELLED
    assert engine.status("b", "same").entry.state is MessageState.DELIVERED
    assert [r.record.body for r in receive(engine, "b")] == [b"B"]
    assert receive(engine, "a") == []


def test_cancel_unknown_message_is_not_found(engine: Engine, clock: FakeClock) -> None:
    send(engine, "t", "known", clock.now_ms() + 100)
    with pytest.raises(MessageNotFound):
        cancel(engine, "t", "unknown")
    with pytest.raises(MessageNotFound):
        cancel(engine, "other", "known")
    with pytest.raises(MessageNotFound):
        engine.status("t", "unknown")


def test_cancel_delivered_message_is_a_conflict(engine: Engine, clock: FakeClock) -> None:
    send(engine, "t", "now", clock.now_ms())
    with pytest.raises(MessageConflict):
        cancel(engine, "t", "now")
    send(engine, "t", "later", clock.now_ms() + 10)
    clock.advance(10)
    wait_until(lambda: settled(engine), what="delivery")
    with pytest.raises(MessageConflict):
        cancel(engine, "t", "later")
    assert engine.status("t", "later").entry.state is MessageState.DELIVERED


def test_cancel_twice_gives_the_same_result(engine: Engine, clock: FakeClock) -> None:
    start = clock.now_ms()
    send(engine, "t", "m", start + 10_000)
    first = cancel(engine, "t", "m")
    clock.advance(500)
    second = cancel(engine, "t", "m")
    assert first == second == CancelOutcome("t", "m", start)
    assert engine.writer.pending_timers == 0  # counted down once, not twice
    status = engine.status("t", "m")
    assert status.entry.state is MessageState.CANCELLED
    assert status.entry.done_at_ms == start
    assert status.record is None
    assert timer_keys(engine.store) == []  # the tombstone deleted the timer in the same batch


def test_a_cancelled_msg_id_stays_dead(engine: Engine, clock: FakeClock) -> None:
    due = clock.now_ms() + 100
    send(engine, "t", "m", due)
    cancel(engine, "t", "m")
    with pytest.raises(MessageConflict):
        send(engine, "t", "m", due)
    with pytest.raises(MessageConflict):
        send(engine, "t", "m", clock.now_ms())  # not even as an immediate delivery
    clock.advance(1_000)
    assert timer_keys(engine.store) == []
    assert receive(engine, "t") == []
    assert topic_log(engine.store, "t") == []


def test_resending_a_live_message_returns_the_first_record(
    engine: Engine, clock: FakeClock
) -> None:
    start = clock.now_ms()
    first = send(engine, "t", "m", start + 1_000, b"first")
    clock.advance(10)
    again = send(engine, "t", "m", start + 5_000, b"second")
    assert first.created
    assert not again.created
    assert again == SendOutcome(
        False, "t", "m", MessageState.SCHEDULED, start + 1_000, first.created_at_ms
    )
    assert engine.writer.pending_timers == 1
    assert len(timer_keys(engine.store)) == 1
    status = engine.status("t", "m")
    assert status.record is not None
    assert status.record.body == b"first"

    clock.advance(990)
    wait_until(lambda: settled(engine), what="delivery")
    after = send(engine, "t", "m", start, b"third")
    assert not after.created
    assert after.state is MessageState.DELIVERED
    assert after.deliver_at_ms == start + 1_000
    assert [r.record.body for r in receive(engine, "t")] == [b"first"]


def test_send_batch_items_succeed_or_fail_alone(engine: Engine, clock: FakeClock) -> None:
    now = clock.now_ms()
    send(engine, "t", "dead", now + 100)
    cancel(engine, "t", "dead")
    results = run(
        engine.send_batch(
            [
                record("t", "a", now + 100),
                record("t", "dead", now + 100),
                None,
                record("t", "a", now + 999),  # a duplicate within the same batch
                record("t", "b", now),
            ]
        )
    )
    assert isinstance(results[0], SendOutcome)
    assert results[0].created
    assert isinstance(results[1], MessageConflict)
    assert results[2] is None
    assert isinstance(results[3], SendOutcome)
    assert not results[3].created
    assert results[3].deliver_at_ms == now + 100
    assert isinstance(results[4], SendOutcome)
    assert results[4].state is MessageState.DELIVERED
    assert engine.writer.pending_timers == 1


def test_server_made_ids_skip_the_index_lookup_but_not_a_twin_in_the_batch(
    engine: Engine, clock: FakeClock
) -> None:
    """A fresh (server-made) id is not looked up in the index; a client id that happens to
    equal one in the same batch still sees it staged, and the first send wins."""
    due = clock.now_ms() + 60_000
    first = record("t", "0123456789abcdef0123456789abcdef", due, b"first")
    twin = record("t", first.msg_id, due + 5, b"twin")
    other = record("t", "other", due)
    send(engine, "t", "other", due)  # already there: a client id is looked up
    out = run(engine.send_batch([first, twin, other], [True, False, False]))
    assert [o.created for o in out if isinstance(o, SendOutcome)] == [True, False, False]
    assert [o.deliver_at_ms for o in out if isinstance(o, SendOutcome)] == [due, due, due]
    status = engine.status("t", first.msg_id)
    assert status.record is not None
    assert status.record.body == b"first"
    # The other order: the client's id first, then the same id as a fresh one.
    client, fresh = record("u", "x" * 32, due, b"client"), record("u", "x" * 32, due, b"fresh")
    out = run(engine.send_batch([client, fresh], [False, True]))
    assert [o.created for o in out if isinstance(o, SendOutcome)] == [True, False]
    status = engine.status("u", "x" * 32)
    assert status.record is not None
    assert status.record.body == b"client"
    assert engine.writer.pending_timers == 3
