"""Retention: delivered messages go after retention_ms, unless a group still holds them."""

from __future__ import annotations

import pytest

from tests.workers.conftest import EngineFactory
from tests.workers.support import record, run, topic_log, wait_until
from workers.clock import FakeClock
from workers.errors import MessageNotFound
from workers.retry import FixedPolicy, GroupSettings

RETENTION = 60_000
INVISIBLE = 3_600_000  # held for an hour: the hold, not its end, is what is tested


def test_retention_reclaims_old_messages_but_keeps_held_ones(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = make_engine(retention_ms=RETENTION, sweep_interval_ms=10**9)
    engine.start()
    for i in range(5):
        run(engine.send(record("t", f"m{i}", clock.now_ms())))
    got = run(engine.receive("t", "g", 10, 0, INVISIBLE))
    assert [r.record.msg_id for r in got] == [f"m{i}" for i in range(5)]
    acked = [r.receipt for r in got if r.record.msg_id != "m3"]
    assert run(engine.ack("t", "g", acked)) == ["acked"] * 4
    clock.advance(RETENTION - 1)
    assert engine.sweeper.retain() == 0, "nothing is past retention yet"
    clock.advance(1)
    assert engine.sweeper.retain() == 3, "m0..m2 go; m3 is held, so it and what follows stay"
    assert [r.msg_id for r in topic_log(engine.store, "t")] == ["m3", "m4"]
    with pytest.raises(MessageNotFound):
        engine.status("t", "m0")
    assert engine.status("t", "m3").entry.seq == 3
    # A reclaimed msg_id may be used again: it is a new message.
    assert run(engine.send(record("t", "m0", clock.now_ms()))).created
    held = next(r for r in got if r.record.msg_id == "m3")
    assert run(engine.ack("t", "g", [held.receipt])) == ["acked"]
    assert engine.sweeper.retain() == 2
    assert [r.msg_id for r in topic_log(engine.store, "t")] == ["m0"]


def test_retention_keeps_messages_waiting_for_a_retry(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = make_engine(retention_ms=RETENTION, sweep_interval_ms=10**9)
    engine.start()
    retry = FixedPolicy(policy="fixed", interval_ms=2 * RETENTION)
    run(engine.put_group_settings("t", "g", GroupSettings(retry=retry)))
    run(engine.send(record("t", "m", clock.now_ms())))
    got = run(engine.receive("t", "g", 10, 0, INVISIBLE))
    assert run(engine.nack("t", "g", [got[0].receipt], None)) == ["nacked"]
    clock.advance(RETENTION + 1)
    assert engine.sweeper.retain() == 0
    clock.advance(RETENTION)
    wait_until(lambda: engine.group_view("t", "g", "m").state == "pending")
    again = run(engine.receive("t", "g", 10, 0, INVISIBLE))
    assert [(r.record.msg_id, r.attempt) for r in again] == [("m", 2)]
    assert run(engine.ack("t", "g", [again[0].receipt])) == ["acked"]
    assert engine.sweeper.retain() >= 1
    assert topic_log(engine.store, "t") == []
