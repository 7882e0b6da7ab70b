"""Retention: by time, per message; nothing a group does blocks it; dead letters keep
their own retention; nothing grows without bound (workers/ops/retention.py, issue 10)."""

from __future__ import annotations

import logging

import pytest

from storage import keys
from storage.errors import MessageNotFound
from storage.store import CF, RocksStore
from storage.txn import Txn
from tests.workers.conftest import EngineFactory
from tests.workers.support import call, record, run, topic_log, wait_until
from workers.clock import FakeClock
from workers.engine import Engine
from workers.ops import consume, retention
from workers.rules.retry import FixedPolicy, GroupSettings

RETENTION = 60_000
DLQ_RETENTION = 5 * RETENTION
INVISIBLE = 3_600_000  # held for an hour: the hold, not its end, is what is tested
ALWAYS_THERE = {keys.RECEIPT_SECRET_KEY, keys.WATERMARK_KEY, keys.PENDING_KEY, keys.EVENTS_NEXT_KEY}


def every(store: RocksStore, cf: str) -> list[bytes]:
    return [k for k, _ in store.scan(cf, b"", b"\xff" * 8, 10**9)]


def bookkeeping(store: RocksStore) -> list[bytes]:
    """Meta keys beyond the store's few singletons and the groups' settings and counts
    (one per topic and group, as long as the topic is listed)."""
    listed = (b"group", keys.TOPIC_COUNTS_PREFIX)
    return [k for k in every(store, CF.META) if k not in ALWAYS_THERE and not k.startswith(listed)]


def started(make_engine: EngineFactory, **overrides: int) -> Engine:
    engine = make_engine(
        retention_ms=RETENTION,
        dlq_retention_ms=overrides.pop("dlq_retention_ms", DLQ_RETENTION),
        sweep_interval_ms=10**9,
        **overrides,
    )
    engine.start()
    return engine


def send_now(engine: Engine, topic: str, *ids: str) -> None:
    now = engine.clock.now_ms()
    outcomes = run(engine.send_batch([record(topic, i, now) for i in ids]))
    assert all(not isinstance(o, Exception) for o in outcomes)


def receive(
    engine: Engine, group: str, topic: str = "t", invisible: int = INVISIBLE, limit: int = 10**6
) -> list[str]:
    """Receipts of every message visible to the group (``limit`` at most)."""
    out: list[str] = []
    while len(out) < limit:
        got = run(engine.receive(topic, group, min(1000, limit - len(out)), 0, invisible))
        if not got:
            break
        out += [g.receipt for g in got]
    return out


def test_one_abandoned_message_does_not_block_retention(
    make_engine: EngineFactory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 10.2: a group takes one message for 1 s and never comes back; another group
    acks the next 1,000. After retention all 1,001 go, and so do the groups' records."""
    engine = started(make_engine)
    send_now(engine, "t", "abandoned")
    assert len(receive(engine, "lazy", invisible=1_000)) == 1
    send_now(engine, "t", *(f"m{i}" for i in range(1_000)))
    busy = receive(engine, "busy")
    assert len(busy) == 1_001
    assert run(engine.ack("t", "busy", busy)) == ["acked"] * 1_001
    clock.advance(RETENTION)
    wait_until(lambda: engine.group_view("t", "lazy", "abandoned").state == "pending")
    caplog.set_level(logging.WARNING, logger="rocktimer.sweeper")
    assert engine.sweeper.retain() == 1_001
    assert topic_log(engine.store, "t") == []
    assert every(engine.store, CF.INFLIGHT) == []
    assert every(engine.store, CF.MESSAGES) == []
    assert engine.sweeper.lost == 1_001  # all of them, for "lazy"; none for "busy"
    assert [r.getMessage().split(" lost")[0] for r in caplog.records] == ["group 'lazy'"]
    assert receive(engine, "lazy") == []  # gone for it, and it reads on from there


def test_a_message_held_in_flight_at_its_retention_end_finishes_its_attempt(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = started(make_engine)
    send_now(engine, "t", "kept", "failed")
    kept, failed = receive(engine, "g")
    clock.advance(RETENTION)
    assert engine.sweeper.retain() == 2
    assert [r.msg_id for r in topic_log(engine.store, "t")] == ["kept", "failed"]
    assert engine.status("t", "kept").entry.seq == 0  # still there while it is held
    assert not run(engine.send(record("t", "kept", clock.now_ms()))).created  # not free yet
    assert run(engine.ack("t", "g", [kept])) == ["acked"]
    assert run(engine.nack("t", "g", [failed], 0)) == ["nacked"]  # a failed attempt ...
    assert receive(engine, "g") == []  # ... past retention is not retried
    assert engine.sweeper.retain() == 0
    assert topic_log(engine.store, "t") == []
    assert every(engine.store, CF.INFLIGHT) == []
    assert bookkeeping(engine.store) == []
    with pytest.raises(MessageNotFound):
        engine.status("t", "kept")
    assert run(engine.send(record("t", "kept", clock.now_ms()))).created  # reusable now


def test_an_invisibility_ending_after_retention_does_not_bring_the_message_back(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = started(make_engine)
    send_now(engine, "t", "m")
    receive(engine, "g", invisible=2 * RETENTION)
    clock.advance(RETENTION)
    engine.sweeper.retain()
    clock.advance(RETENTION)
    wait_until(lambda: every(engine.store, CF.INFLIGHT) == [], what="the attempt to end")
    assert receive(engine, "g") == []
    engine.sweeper.retain()
    assert topic_log(engine.store, "t") == []
    assert every(engine.store, CF.TIMERS) == []


def test_sweep_and_receive_in_one_batch(make_engine: EngineFactory, clock: FakeClock) -> None:
    """Issue 10.3: one batch sweeps m0..m9, then receives: the receive sees the sweep (no
    message whose log entry this commit deletes, no record left behind)."""
    engine = started(make_engine)
    send_now(engine, "t", *(f"m{i}" for i in range(10)))
    first = receive(engine, "g", limit=1)
    assert run(engine.ack("t", "g", first)) == ["acked"]
    clock.advance(RETENTION)
    cutoff = clock.now_ms() - RETENTION
    lane = keys.topic_lane("t")

    def both(txn: Txn) -> tuple[retention.Swept, list[consume.Received]]:
        swept = retention.sweep_lane(txn, lane, cutoff, cutoff)
        return swept, consume.receive(txn, "t", "g", 16, INVISIBLE)

    swept, got = call(engine.writer, both, durable=False)
    assert swept.passed == 10
    assert got == []  # none of m1..m9 (the group had not received them: gone for it)
    assert topic_log(engine.store, "t") == []
    assert every(engine.store, CF.INFLIGHT) == []


def test_a_receive_before_the_sweep_in_the_same_batch_holds_its_messages(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = started(make_engine)
    send_now(engine, "t", "m")
    clock.advance(RETENTION)
    cutoff = clock.now_ms() - RETENTION

    def both(txn: Txn) -> list[consume.Received]:
        got = consume.receive(txn, "t", "g", 16, INVISIBLE)
        retention.sweep_lane(txn, keys.topic_lane("t"), cutoff, cutoff)
        return got

    got = call(engine.writer, both, durable=False)
    assert [g.record.msg_id for g in got] == ["m"]
    assert [r.msg_id for r in topic_log(engine.store, "t")] == ["m"]  # held: kept
    assert run(engine.ack("t", "g", [got[0].receipt])) == ["acked"]
    engine.sweeper.retain()
    assert topic_log(engine.store, "t") == []
    assert every(engine.store, CF.INFLIGHT) == []


def bury(engine: Engine, clock: FakeClock, ids: list[str]) -> None:
    """Make each message a dead letter of group "g" (one attempt allowed)."""
    run(engine.put_group_settings("t", "g", GroupSettings(max_attempts=1)))
    send_now(engine, "t", *ids)
    assert run(engine.nack("t", "g", receive(engine, "g"), None)) == ["nacked"] * len(ids)


def dead_views(engine: Engine) -> tuple[list[str], list[str], list[str]]:
    """The three views of dead letters: the listing, %DLQ% receive, per-group status."""
    listed = [d.msg_id for _, d in engine.dead_letters("t", "g", None, 1000)[0]]
    peeked = run(engine.receive("%DLQ%g", "ops", 1000, 0, 1_000))
    run(engine.nack("%DLQ%g", "ops", [p.receipt for p in peeked], 0))  # leave them there
    states = []
    for msg_id in ("d0", "d1", "d2"):
        try:
            states.append(engine.group_view("t", "g", msg_id).state)
        except MessageNotFound:
            states.append("404")
    return listed, [p.record.msg_id for p in peeked], states


def test_dead_letters_outlive_their_topics_retention_and_then_go_everywhere_at_once(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    """Issue 10.4: listing, %DLQ% receive, status and redrive agree, before and after."""
    engine = started(make_engine)
    bury(engine, clock, ["d0", "d1", "d2"])
    clock.advance(RETENTION)
    engine.sweeper.retain()
    assert dead_views(engine) == (["d0", "d1", "d2"], ["d0", "d1", "d2"], ["dead"] * 3)
    run(engine.redrive("t", "g", "d1"))  # past the topic's retention: one more attempt
    assert dead_views(engine) == (["d0", "d2"], ["d0", "d2"], ["dead", "pending", "dead"])
    receipts = receive(engine, "g")
    assert run(engine.ack("t", "g", receipts)) == ["acked"]
    clock.advance(DLQ_RETENTION - RETENTION)
    engine.sweeper.retain()
    assert dead_views(engine) == ([], [], ["404"] * 3)
    with pytest.raises(MessageNotFound):
        run(engine.redrive("t", "g", "d0"))
    engine.sweeper.retain()
    assert every(engine.store, CF.DEAD) == []
    assert every(engine.store, CF.INFLIGHT) == []
    assert every(engine.store, CF.LOGS) == []
    assert every(engine.store, CF.MESSAGES) == []
    assert bookkeeping(engine.store) == []


def test_dead_letters_go_at_their_own_retention_even_before_their_topics(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = started(make_engine, dlq_retention_ms=RETENTION // 2)
    bury(engine, clock, ["d0"])
    clock.advance(RETENTION // 2)
    engine.sweeper.retain()
    assert dead_views(engine) == ([], [], ["404", "404", "404"])
    assert every(engine.store, CF.DEAD) == []
    clock.advance(RETENTION)
    engine.sweeper.retain()
    assert every(engine.store, CF.LOGS) == []


def test_tombstones_and_empty_lanes_bookkeeping_are_reclaimed(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    """Issue 10.5: cancel tombstones and the seq / cursor / sweep keys of lanes go after
    retention; a cancelled msg_id may then be used again."""
    engine = started(make_engine)
    run(
        engine.put_group_settings(
            "t", "g", GroupSettings(retry=FixedPolicy(policy="fixed", interval_ms=1_000))
        )
    )
    run(engine.send(record("t", "cancelled", clock.now_ms() + 10_000)))
    run(engine.cancel("t", "cancelled"))
    send_now(engine, "t", "retried")
    run(engine.nack("t", "g", receive(engine, "g"), None))
    clock.advance(1_000)
    wait_until(lambda: engine.group_view("t", "g", "retried").state == "pending")
    assert run(engine.ack("t", "g", receive(engine, "g"))) == ["acked"]
    assert bookkeeping(engine.store) != []
    clock.advance(RETENTION)
    engine.sweeper.retain()
    engine.sweeper.retain()  # the lanes found empty by the first sweep lose their keys
    assert every(engine.store, CF.MESSAGES) == []
    assert every(engine.store, CF.LOGS) == []
    assert bookkeeping(engine.store) == []
    assert run(engine.send(record("t", "cancelled", clock.now_ms()))).created
    assert [g.record.msg_id for g in run(engine.receive("t", "g", 10, 0, INVISIBLE))] == [
        "cancelled"
    ]


def test_a_topic_with_nothing_left_loses_its_counts_and_is_not_listed(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    """Issue 30.7: after 300 topics were swept empty by retention, 600 count keys remained
    and GET /v1/topics still listed all 300. A topic whose log, messages (a cancel's
    tombstone too) and schedules are all gone loses its counts and its groups' (each zero
    by then); one with anything left stays listed with its counts."""
    engine = started(make_engine)
    dead = [f"gone-{i:03}" for i in range(300)]
    for topic in dead:
        send_now(engine, topic, "m")
        run(engine.put_group_settings(topic, "g", GroupSettings(filter="TagA")))
        run(engine.put_group_settings(topic, "g", GroupSettings()))  # a filter history
        assert run(engine.ack(topic, "g", receive(engine, "g", topic))) == ["acked"]
    tagged = record(dead[0], "tagged", clock.now_ms())._replace(tag="TagA")  # a tag counter
    run(engine.send(tagged))
    assert run(engine.ack(dead[0], "g", receive(engine, "g", dead[0]))) == ["acked"]
    run(engine.send(record("cancelled", "c", clock.now_ms() + 10_000)))
    run(engine.cancel("cancelled", "c"))
    run(engine.send(record("later", "l", clock.now_ms() + 10 * RETENTION)))  # scheduled
    clock.advance(RETENTION)
    send_now(engine, "live", "fresh")  # delivered now: within its retention
    receive(engine, "g", "live")
    engine.sweeper.retain()
    engine.sweeper.retain()  # the lanes found empty by the first sweep are forgotten
    listed, more = engine.topics(None, 1_000)
    assert [(t.topic, t.scheduled, t.delivered) for t in listed] == [
        ("later", 1, 0),
        ("live", 0, 1),
    ]
    assert not more
    left = [k for k in bookkeeping(engine.store) if b"live" not in k and b"later" not in k]
    assert left == []
    counts = [
        k
        for k in every(engine.store, CF.META)
        if k.startswith((keys.TOPIC_COUNTS_PREFIX, b"group-counts"))
    ]
    assert counts == [
        keys.group_counts_key("live", "g"),
        keys.topic_counts_key("later"),
        keys.topic_counts_key("live"),
    ]
    assert engine.groups("live", None, 10)[0][0].inflight == 1
    send_now(engine, dead[0], "again")  # a forgotten topic used again starts afresh
    assert engine.topics(None, 1)[0][0].topic == dead[0]
    assert engine.topics(None, 1)[0][0].delivered == 1
    assert [g.record.msg_id for g in run(engine.receive(dead[0], "g", 10, 0, INVISIBLE))] == [
        "again"
    ]


def test_a_retry_lane_nobody_reads_goes_with_its_topic(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    """Issue 30.7: a group that failed a message and never came back kept its retry lane
    for the topic (seq counter, cursor, the entry) after retention emptied the topic, and
    its entries named seqs the topic's log hands out again once it starts afresh."""
    engine = started(make_engine)
    send_now(engine, "t", "m")
    assert run(engine.nack("t", "left", receive(engine, "left"), 0)) == ["nacked"]  # ready
    assert run(engine.nack("t", "later", receive(engine, "later"), 600_000)) == ["nacked"]
    assert every(engine.store, CF.LOGS) != [keys.log_key(keys.topic_lane("t"), 0)]
    clock.advance(RETENTION)
    engine.sweeper.retain()
    engine.sweeper.retain()  # the lanes found empty by the first sweep are forgotten
    assert every(engine.store, CF.LOGS) == []
    assert bookkeeping(engine.store) == []
    assert retention.lanes(engine.store) == []
    send_now(engine, "t", "new")  # seq 0 again: read once, by each group
    for group in ("left", "later"):
        got = run(engine.receive("t", group, 10, 0, INVISIBLE))
        assert [(g.record.msg_id, g.attempt) for g in got] == [("new", 1)]
