"""The event log on a real engine and store: one event per state change, written in the
same WriteBatch as the change, numbered by a counter that is never reused."""

from __future__ import annotations

from typing import Any

import pytest

from storage import keys
from storage.errors import MessageConflict
from storage.event_table import decode
from storage.events import EventKind
from storage.store import CF, Put, RocksStore
from storage.txn import Txn
from tests.workers.conftest import EngineFactory
from tests.workers.support import RecordingStore, call, record, run, wait_until
from workers.clock import FakeClock
from workers.engine import Engine
from workers.ops import events, messages
from workers.ops.move import move_due
from workers.rules.retry import FixedPolicy, GroupSettings
from workers.writer import Writer

S = 1_000
NEVER = 10**12  # a seal interval the fake clock never reaches: events stay in the CF
INVISIBLE = 30 * S
END = b"\xff" * 9


def cf_events(store: RocksStore) -> list[dict[str, Any]]:
    """Every event still in the events CF, in seq order."""
    rows: list[dict[str, Any]] = decode(store.scan(CF.EVENTS, b"", END, 10**9)).to_pylist()
    return rows


def story(rows: list[dict[str, Any]], msg_id: str) -> list[tuple[str, str | None, int | None]]:
    return [(r["kind"], r["group"], r["attempt"]) for r in rows if r["msg_id"] == msg_id]


def quiet_engine(make_engine: EngineFactory, **overrides: Any) -> Engine:
    engine = make_engine(events_seal_ms=NEVER, **overrides)
    engine.start()
    # Its first export (at once: what a crash left) is over; the next is never due.
    wait_until(lambda: engine.exporter.rounds == 1, what="the exporter's first round")
    return engine


def receive(engine: Engine, n: int = 10) -> dict[str, Any]:
    got = run(engine.receive("t", "g", n, 0, INVISIBLE))
    return {r.record.msg_id: r for r in got}


def test_every_kind_once_per_change_in_order(make_engine: EngineFactory, clock: FakeClock) -> None:
    engine = quiet_engine(make_engine)
    t0 = clock.now_ms()
    run(
        engine.put_group_settings(
            "t",
            "g",
            GroupSettings(max_attempts=2, retry=FixedPolicy(policy="fixed", interval_ms=S)),
        )
    )
    run(engine.send(record("t", "later", t0 + S)._replace(tag="blue")))
    run(engine.send(record("t", "later", t0 + S)))  # a resend changes nothing: no event
    run(engine.send(record("t", "now", t0)))  # due: scheduled and delivered at once
    run(engine.send(record("t", "gone", t0 + 5 * S)))
    run(engine.cancel("t", "gone"))
    run(engine.cancel("t", "gone"))  # cancelled already: no change, no event
    with pytest.raises(MessageConflict):
        run(engine.cancel("t", "now"))  # delivered: refused, no event
    with pytest.raises(MessageConflict):
        run(engine.send(record("t", "gone", t0 + 5 * S)))  # a cancelled id: refused
    clock.advance(S)
    wait_until(lambda: engine.status("t", "later").entry.state == 2, what="delivery")
    held = receive(engine)
    assert run(engine.ack("t", "g", [held["now"].receipt])) == ["acked"]
    assert run(engine.ack("t", "g", [held["now"].receipt])) == ["acked"]  # again: no event
    assert run(engine.nack("t", "g", [held["later"].receipt], None)) == ["nacked"]
    clock.advance(S)
    wait_until(lambda: engine.group_view("t", "g", "later").state == "pending", what="retry")
    assert receive(engine)["later"].attempt == 2
    clock.advance(INVISIBLE)  # the second attempt's invisibility runs out: dead
    wait_until(lambda: engine.group_view("t", "g", "later").state == "dead", what="expiry")
    run(engine.redrive("t", "g", "later"))
    last = receive(engine)["later"]
    assert run(engine.ack("t", "g", [last.receipt])) == ["acked"]

    rows = cf_events(engine.store)
    assert story(rows, "later") == [
        ("scheduled", None, None),
        ("delivered", None, None),
        ("received", "g", 1),
        ("nacked", "g", 1),
        ("received", "g", 2),
        ("expired", "g", 2),
        ("dead", "g", 2),
        ("redriven", "g", 2),
        ("received", "g", 1),
        ("acked", "g", 1),
    ]
    assert story(rows, "now") == [
        ("scheduled", None, None),
        ("delivered", None, None),
        ("received", "g", 1),
        ("acked", "g", 1),
    ]
    assert story(rows, "gone") == [("scheduled", None, None), ("cancelled", None, None)]
    assert len(rows) == 16
    assert [r["seq"] for r in rows] == list(range(16)), "strictly increasing, no gap"
    later = [r for r in rows if r["msg_id"] == "later"]
    assert {(r["topic"], r["deliver_at_ms"], r["created_at_ms"], r["tag"]) for r in later} == {
        ("t", t0 + S, t0, "blue")
    }
    assert [r["event_time_ms"] for r in later[:2]] == [t0, t0 + S]
    assert later[5]["event_time_ms"] == t0 + 2 * S + INVISIBLE


def test_a_dlq_receive_names_the_dlq_topic(make_engine: EngineFactory, clock: FakeClock) -> None:
    engine = quiet_engine(make_engine)
    run(engine.put_group_settings("t", "g", GroupSettings(max_attempts=1)))
    run(engine.send(record("t", "m", clock.now_ms())))
    got = receive(engine)["m"]
    run(engine.nack("t", "g", [got.receipt], None))
    dlq = keys.DLQ_PREFIX + "g"
    (letter,) = run(engine.receive(dlq, "ops", 1, 0, INVISIBLE))
    rows = cf_events(engine.store)
    assert [(r["kind"], r["topic"], r["group"]) for r in rows][-3:] == [
        ("nacked", "t", "g"),
        ("dead", "t", "g"),
        ("received", dlq, "ops"),
    ]
    assert rows[-1]["msg_id"] == letter.record.msg_id == "m"


def test_one_nack_of_a_lot_that_goes_two_ways(make_engine: EngineFactory, clock: FakeClock) -> None:
    """A nack stages the usual retries of its lot at once and a dead letter as it comes:
    each message's events stay in order (nacked, then dead) and each is counted once."""
    engine = quiet_engine(make_engine)
    settings = GroupSettings(max_attempts=2, retry=FixedPolicy(policy="fixed", interval_ms=S))
    run(engine.put_group_settings("t", "g", settings))
    for msg_id in ("a", "b", "c"):
        run(engine.send(record("t", msg_id, clock.now_ms())))
    first = receive(engine)
    assert run(engine.nack("t", "g", [first["a"].receipt], 0)) == ["nacked"]  # ready again
    (again,) = receive(engine).values()  # a's second attempt: its last
    lot = [first["b"].receipt, again.receipt, first["c"].receipt]
    assert run(engine.nack("t", "g", lot, None)) == ["nacked"] * 3
    rows = cf_events(engine.store)
    assert story(rows, "a")[-3:] == [("received", "g", 2), ("nacked", "g", 2), ("dead", "g", 2)]
    assert story(rows, "b")[-1] == story(rows, "c")[-1] == ("nacked", "g", 1)
    (summary,), _ = engine.groups("t", None, 10)
    assert (summary.inflight, summary.retrying, summary.dead) == (0, 2, 1)
    clock.advance(S)  # b and c come back after the fixed interval, a does not
    back: set[str] = set()

    def both_back() -> bool:
        back.update(receive(engine))
        return back == {"b", "c"}

    wait_until(both_back, what="the retries")


def test_a_storm_span_has_one_delivered_event_per_message(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = quiet_engine(make_engine, scan_chunk=700)  # spans of point and range deletes
    due = clock.now_ms() + S
    n = 3_000
    recs = [record("storm", f"m{i}", due) for i in range(n)]
    run(engine.send_batch(recs))
    clock.advance(S)
    wait_until(lambda: engine.writer.pending_timers == 0, what="the storm drained")
    delivered = [r for r in cf_events(engine.store) if r["kind"] == "delivered"]
    assert sorted(r["msg_id"] for r in delivered) == sorted(r.msg_id for r in recs)
    assert {r["deliver_at_ms"] for r in delivered} == {due}


def test_a_message_cancelled_after_the_scan_gets_no_delivered_event(
    store: RecordingStore, writer: Writer, clock: FakeClock
) -> None:
    due = clock.now_ms() + S
    call(
        writer,
        lambda txn: messages.send_many(txn, [record("t", m, due) for m in "abc"]),
        durable=True,
    )
    scanned = store.scan(CF.TIMERS, b"", END, 10)
    call(writer, lambda txn: messages.cancel(txn, "t", "b"), durable=True)
    clock.advance(S)
    call(writer, lambda txn: move_due(txn, scanned), durable=False)
    rows = cf_events(store)
    assert [(r["kind"], r["msg_id"]) for r in rows if r["kind"] != "scheduled"] == [
        ("cancelled", "b"),
        ("delivered", "a"),
        ("delivered", "c"),
    ]


def test_events_are_written_in_the_batch_of_their_change(
    store: RecordingStore, writer: Writer, clock: FakeClock
) -> None:
    due = clock.now_ms() + S
    call(writer, lambda txn: messages.send(txn, record("t", "x", due)), durable=True)
    call(writer, lambda txn: messages.cancel(txn, "t", "x"), durable=True)
    # A batch of three sends, one refused (a cancelled id): its event goes with it.
    batch = [record("t", "y", due), record("t", "x", due), record("t", "z", due)]
    out = call(writer, lambda txn: messages.send_many(txn, batch), durable=True)
    assert isinstance(out[1], MessageConflict)
    writes = [ops for ops, _ in store.writes]
    assert len(writes) == 3
    for ops, expected in zip(writes, [["x"], ["x"], ["y", "z"]], strict=True):
        (value,) = [op for op in ops if isinstance(op, Put) and op.cf == CF.EVENTS]
        rows = decode([(value.key, value.value)]).to_pylist()
        assert [r["msg_id"] for r in rows] == expected
        counter = [op for op in ops if isinstance(op, Put) and op.key == keys.EVENTS_NEXT_KEY]
        assert counter, "the seq counter moves in the same batch"
        assert keys.read_u64(counter[0].value) == rows[-1]["seq"] + 1


def test_a_rolled_back_op_leaves_no_event(store: RecordingStore, clock: FakeClock) -> None:
    txn = Txn(store, clock.now_ms())
    point = txn.savepoint()
    messages.send(txn, record("t", "undone", clock.now_ms() + S))
    txn.rollback(point)
    messages.send(txn, record("t", "kept", clock.now_ms() + S))
    txn.commit(0)
    assert [r["msg_id"] for r in cf_events(store)] == ["kept"]


def test_with_the_event_log_off_nothing_is_staged(store: RecordingStore, clock: FakeClock) -> None:
    txn = Txn(store, clock.now_ms(), log_events=False)
    messages.send(txn, record("t", "m", clock.now_ms()))
    events.emit_plain(txn, EventKind.CANCELLED, "t", "m", 1, 1)
    txn.commit(0)
    assert cf_events(store) == []
    assert store.get(CF.META, keys.EVENTS_NEXT_KEY) is None


def test_seqs_go_on_after_a_restart_and_an_export(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    first = quiet_engine(make_engine)
    run(first.send(record("t", "a", clock.now_ms() + S)))
    assert first.exporter.export() == 1  # the CF is empty now; the counter is not
    first.stop()
    second = quiet_engine(make_engine)
    run(second.send(record("t", "b", clock.now_ms() + S)))
    assert [(r["seq"], r["msg_id"]) for r in cf_events(second.store)] == [(1, "b")]
