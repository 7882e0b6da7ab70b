"""Nack, invisibility, retry back-off, dead letters and redrive on a real engine and store,
driven by a fake clock."""

from __future__ import annotations

import pytest

from storage.errors import MessageConflict, MessageNotFound
from storage.keys import DLQ_PREFIX
from tests.workers.conftest import EngineFactory
from tests.workers.support import record, run, wait_until
from workers.clock import FakeClock
from workers.engine import Engine
from workers.ops.consume import Received
from workers.rules.retry import FixedPolicy, GroupSettings

S = 1_000
M = 60 * S
H = 60 * M
INVISIBLE = 30 * S


def receive(engine: Engine, topic: str = "t", group: str = "g", n: int = 10) -> list[Received]:
    return run(engine.receive(topic, group, n, 0, INVISIBLE))


def receive_one(engine: Engine, topic: str = "t", group: str = "g") -> Received:
    got = receive(engine, topic, group)
    assert len(got) == 1, got
    return got[0]


def state(engine: Engine, msg_id: str = "m", topic: str = "t", group: str = "g") -> str:
    return engine.group_view(topic, group, msg_id).state


def test_sixteen_nacks_see_rocketmq_delays_then_dlq_then_redrive(
    engine: Engine, clock: FakeClock
) -> None:
    run(engine.send(record("t", "m", clock.now_ms())))
    delays = []
    for attempt in range(1, 17):
        got = receive_one(engine)
        assert got.attempt == attempt
        assert run(engine.nack("t", "g", [got.receipt], None)) == ["nacked"]
        view = engine.group_view("t", "g", "m")
        if attempt == 16:
            assert view.state == "dead"
            break
        assert view.state == "retrying"
        assert view.next_visible_ms is not None
        assert view.last_failure_ms is not None
        delays.append(view.next_visible_ms - view.last_failure_ms)
        assert receive(engine) == [], "invisible during the back-off"
        clock.advance(delays[-1] - 1)
        assert receive(engine) == [], "still backing off 1 ms before the end"
        clock.advance(1)
        wait_until(lambda: state(engine) == "pending", what="retry timer firing")
    assert delays == [
        10 * S, 30 * S, 1 * M, 2 * M, 3 * M, 4 * M, 5 * M, 6 * M, 7 * M, 8 * M, 9 * M,
        10 * M, 20 * M, 30 * M, 1 * H,
    ]  # fmt: skip
    letters, more = engine.dead_letters("t", "g", None, 10)
    assert not more
    assert [(d.msg_id, d.attempts) for _, d in letters] == [("m", 16)]
    dead = receive_one(engine, topic=DLQ_PREFIX + "g", group="ops")
    assert dead.record.topic == "t", "a dead letter carries its source topic"
    assert receive(engine) == [], "a dead letter is not redelivered"

    run(engine.redrive("t", "g", "m"))
    assert engine.dead_letters("t", "g", None, 10) == ([], False)
    again = receive_one(engine)
    assert again.attempt == 1, "redrive resets attempts"
    assert run(engine.ack("t", "g", [again.receipt])) == ["acked"]
    clock.advance(INVISIBLE + 1)
    assert receive(engine) == []
    assert state(engine) == "acked"
    with pytest.raises(MessageNotFound):
        run(engine.redrive("t", "g", "m"))


def test_invisibility_expiry_counts_as_an_attempt(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = make_engine()
    engine.start()
    run(engine.put_group_settings("t", "g", GroupSettings(max_attempts=2)))
    run(engine.send(record("t", "m", clock.now_ms())))
    first = receive_one(engine)
    clock.advance(INVISIBLE)
    wait_until(lambda: state(engine) == "pending", what="invisibility expiry")
    second = receive_one(engine)
    assert second.attempt == 2, "visible again at once, attempt + 1"
    clock.advance(INVISIBLE)
    wait_until(lambda: state(engine) == "dead", what="second expiry → DLQ")
    assert run(engine.ack("t", "g", [first.receipt, second.receipt])) == ["expired", "expired"]
    assert [d.attempts for _, d in engine.dead_letters("t", "g", None, 10)[0]] == [2]


def test_extending_invisibility_keeps_the_message_away_and_kills_the_old_receipt(
    engine: Engine, clock: FakeClock
) -> None:
    run(engine.send(record("t", "m", clock.now_ms())))
    got = receive_one(engine)
    clock.advance(INVISIBLE - 5 * S)
    renewed = run(engine.change_invisibility("t", "g", got.receipt, 60 * S))
    assert renewed != got.receipt
    clock.advance(30 * S)  # past the first deadline
    assert receive(engine) == []
    assert state(engine) == "inflight"
    assert run(engine.ack("t", "g", [got.receipt])) == ["expired"]
    with pytest.raises(MessageConflict):
        run(engine.change_invisibility("t", "g", got.receipt, 60 * S))
    assert run(engine.ack("t", "g", [renewed])) == ["acked"]
    clock.advance(60 * S)
    assert receive(engine) == []


def test_two_groups_on_one_topic_progress_independently(engine: Engine, clock: FakeClock) -> None:
    run(
        engine.put_group_settings(
            "t", "b", GroupSettings(retry=FixedPolicy(policy="fixed", interval_ms=S))
        )
    )
    run(engine.send(record("t", "m", clock.now_ms())))
    a = receive_one(engine, group="a")
    b = receive_one(engine, group="b")
    assert run(engine.ack("t", "a", [a.receipt])) == ["acked"]
    assert run(engine.nack("t", "b", [b.receipt], None)) == ["nacked"]
    assert state(engine, group="a") == "acked"
    assert state(engine, group="b") == "retrying"
    clock.advance(S)
    wait_until(lambda: state(engine, group="b") == "pending", what="b's retry")
    assert receive(engine, group="a") == []
    assert receive_one(engine, group="b").attempt == 2


def test_nack_with_delay_overrides_the_policy_and_zero_is_at_once(
    engine: Engine, clock: FakeClock
) -> None:
    run(engine.send(record("t", "m", clock.now_ms())))
    got = receive_one(engine)
    assert run(engine.nack("t", "g", [got.receipt], 2 * S)) == ["nacked"]
    view = engine.group_view("t", "g", "m")
    assert view.next_visible_ms == clock.now_ms() + 2 * S
    clock.advance(2 * S)
    wait_until(lambda: state(engine) == "pending")
    got = receive_one(engine)
    assert run(engine.nack("t", "g", [got.receipt], 0)) == ["nacked"]
    assert receive_one(engine).attempt == 3, "a zero delay is visible again in the same instant"
    assert run(engine.nack("t", "g", [got.receipt, "junk"], None)) == ["expired", "unknown"]


def test_group_state_of_unknown_is_not_found(engine: Engine, clock: FakeClock) -> None:
    run(engine.send(record("t", "m", clock.now_ms())))
    with pytest.raises(MessageNotFound):
        engine.group_view("t", "never", "m")
    receive(engine, n=1)
    with pytest.raises(MessageNotFound):
        engine.group_view("t", "g", "nope")
    run(engine.send(record("t", "m2", clock.now_ms())))
    assert state(engine, "m2") == "pending"


def test_dead_letter_pages(make_engine: EngineFactory, clock: FakeClock) -> None:
    engine = make_engine()
    engine.start()
    run(engine.put_group_settings("t", "g", GroupSettings(max_attempts=1)))
    for i in range(5):
        run(engine.send(record("t", f"m{i}", clock.now_ms())))
    for got in receive(engine):
        run(engine.nack("t", "g", [got.receipt], None))
        clock.advance(1)
    first, more = engine.dead_letters("t", "g", None, 2)
    assert more
    second, more = engine.dead_letters("t", "g", first[-1][0], 2)
    third, more = engine.dead_letters("t", "g", second[-1][0], 2)
    assert not more
    ids = [d.msg_id for page in (first, second, third) for _, d in page]
    assert ids == [f"m{i}" for i in range(5)], "oldest first"


def test_group_counts_follow_every_transition(engine: Engine, clock: FakeClock) -> None:
    def counts() -> tuple[int, int, int, int]:
        (g,), _ = engine.groups("t", None, 10)
        return g.backlog, g.inflight, g.retrying, g.dead

    run(engine.put_group_settings("t", "g", GroupSettings(max_attempts=2)))
    for i in range(4):
        run(engine.send(record("t", f"m{i}", clock.now_ms())))
    assert counts() == (4, 0, 0, 0)
    held = receive(engine, n=3)
    assert counts() == (1, 3, 0, 0)
    run(engine.ack("t", "g", [held[0].receipt]))
    run(engine.nack("t", "g", [held[1].receipt], 2 * INVISIBLE))
    assert counts() == (1, 1, 1, 0)
    clock.advance(INVISIBLE)  # held[2]'s invisibility runs out: visible again at once
    wait_until(lambda: counts() == (2, 0, 1, 0), what="the expiry")
    clock.advance(INVISIBLE)  # held[1]'s back-off ends
    wait_until(lambda: counts() == (3, 0, 0, 0), what="the retry")
    again = receive(engine)
    assert counts() == (0, 3, 0, 0)
    run(engine.nack("t", "g", [r.receipt for r in again if r.attempt == 2], None))
    assert counts() == (0, 1, 0, 2)  # both had their 2 attempts: dead
    run(engine.redrive("t", "g", "m1"))
    assert counts() == (1, 1, 0, 1)
    assert engine.tallies == {
        "acks": 1,
        "nacks": 3,
        "expiries": 1,
        "dead_letters": 2,
        "redrives": 1,
    }
    (topic,), _ = engine.topics(None, 1)
    assert topic == ("%DLQ%g", 0, 2, 0)
