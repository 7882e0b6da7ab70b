"""The Engine's consumer side: receive, ack, and invisibility that runs out (a timer key)."""

from __future__ import annotations

from storage import keys
from storage.records import GroupState, decode_inflight
from storage.store import CF
from tests.workers.conftest import EngineFactory
from tests.workers.support import record, run, start_parts, timer_keys, wait_until
from tests.workers.test_receipts import forge_crc_receipt
from workers.clock import FakeClock
from workers.engine import Engine
from workers.ops.consume import ACKED, EXPIRED, UNKNOWN, Received
from workers.rules.receipts import decode_receipt, encode_receipt
from workers.timers import invisible
from workers.timers.hold import GroupTimer

INVISIBLE_MS = 5_000


def deliver_now(engine: Engine, topic: str, msg_id: str) -> None:
    run(engine.send(record(topic, msg_id, engine.clock.now_ms())))


def receive(
    engine: Engine, topic: str = "t", group: str = "g", wait_ms: int = 0, limit: int = 16
) -> list[Received]:
    return run(engine.receive(topic, group, limit, wait_ms, INVISIBLE_MS))


def ack(engine: Engine, receipts: list[str], topic: str = "t", group: str = "g") -> list[str]:
    return run(engine.ack(topic, group, receipts))


def group_state(engine: Engine, seq: int, topic: str = "t", group: str = "g") -> GroupState:
    raw = engine.store.get(CF.INFLIGHT, keys.inflight_key(topic, group, seq))
    assert raw is not None
    return decode_inflight(raw).state


def test_receive_then_ack(engine: Engine, clock: FakeClock) -> None:
    deliver_now(engine, "t", "m")
    got = receive(engine)
    assert len(got) == 1
    assert got[0].record.msg_id == "m"
    assert got[0].attempt == 1
    assert len(timer_keys(engine.store)) == 1  # the invisibility timer
    assert receive(engine) == []  # held: invisible to the rest of the group

    assert ack(engine, [got[0].receipt]) == [ACKED]
    assert ack(engine, [got[0].receipt]) == [ACKED]  # acking twice is still acked
    assert group_state(engine, 0) is GroupState.ACKED
    assert timer_keys(engine.store) == []  # the ack deleted the timer it left with nothing to do
    clock.advance(INVISIBLE_MS)
    assert receive(engine) == []
    assert group_state(engine, 0) is GroupState.ACKED


def test_a_receipt_given_twice_in_one_op_counts_once(engine: Engine) -> None:
    """Ack and nack read their in-flight records up front (one multi-get); the second copy
    of a receipt still sees what the first one did."""
    for msg_id in ("a", "n"):
        deliver_now(engine, "t", msg_id)
    got = {r.record.msg_id: r.receipt for r in receive(engine)}
    assert ack(engine, [got["a"], got["a"]]) == [ACKED, ACKED]
    assert run(engine.nack("t", "g", [got["n"], got["n"]], 60_000)) == ["nacked", EXPIRED]
    (summary,), _ = engine.groups("t", None, 10)
    assert (summary.inflight, summary.retrying) == (0, 1)  # each counted once


def test_unknown_receipts(engine: Engine) -> None:
    deliver_now(engine, "t", "m")
    receipt = receive(engine)[0].receipt
    assert ack(engine, ["garbage", ""]) == [UNKNOWN, UNKNOWN]
    assert ack(engine, [receipt], group="other") == [UNKNOWN]
    assert ack(engine, [receipt], topic="other") == [UNKNOWN]
    secret = engine.store.secret(keys.RECEIPT_SECRET_KEY)
    held = decode_receipt(secret, receipt, "t", "g")
    assert held is not None
    assert ack(engine, [encode_receipt(secret, "t", "g", 99, 1)]) == [UNKNOWN]  # no such seq
    later = encode_receipt(secret, "t", "g", 0, held.generation + 1)
    assert ack(engine, [later]) == [UNKNOWN]  # a future generation
    assert ack(engine, [forge_crc_receipt("t", "g", 0, 1)]) == [UNKNOWN]  # built by hand
    assert group_state(engine, 0) is GroupState.INFLIGHT  # none of them touched it
    assert ack(engine, [receipt]) == [ACKED]


def test_every_group_receives_every_message(engine: Engine) -> None:
    for i in range(3):
        deliver_now(engine, "t", f"m{i}")
    for group in ("g1", "g2"):
        assert [r.record.msg_id for r in receive(engine, group=group)] == ["m0", "m1", "m2"]
        assert receive(engine, group=group) == []


def test_unacked_message_comes_back_after_its_invisibility(
    engine: Engine, clock: FakeClock
) -> None:
    deliver_now(engine, "t", "m")
    first = receive(engine)[0]
    clock.advance(INVISIBLE_MS - 1)
    assert receive(engine) == []
    clock.advance(1)
    # The invisibility timer fires through the scanner and deliverer, then wakes the poll.
    again = receive(engine, wait_ms=10_000)
    assert [(r.record.msg_id, r.attempt) for r in again] == [("m", 2)]
    assert again[0].receipt != first.receipt
    assert ack(engine, [first.receipt]) == [EXPIRED]
    assert ack(engine, [again[0].receipt]) == [ACKED]
    assert receive(engine) == []


def test_receipt_is_expired_once_visible_again_before_the_next_receive(
    engine: Engine, clock: FakeClock
) -> None:
    deliver_now(engine, "t", "m")
    first = receive(engine)[0]
    clock.advance(INVISIBLE_MS)
    wait_until(lambda: group_state(engine, 0) is GroupState.READY, what="the invisibility end")
    assert ack(engine, [first.receipt]) == [EXPIRED]
    again = receive(engine)
    assert [(r.record.msg_id, r.attempt) for r in again] == [("m", 2)]


def test_receipt_expires_at_its_deadline_even_before_the_timer_fires(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = make_engine()
    start_parts(engine, scanner=False)  # the writer only: no timer ever fires
    deliver_now(engine, "t", "m")
    first = receive(engine)[0]
    clock.advance(INVISIBLE_MS)
    assert ack(engine, [first.receipt]) == [EXPIRED]
    assert group_state(engine, 0) is GroupState.INFLIGHT


def test_one_invisibility_timer_for_a_lot_fires_only_what_is_still_held(
    engine: Engine, clock: FakeClock
) -> None:
    """A receive's first holds share one timer; at its end only the messages still held
    come back: not the acked one, not the nacked one (its retry timer decides), not the one
    whose invisibility was changed (its own timer decides)."""
    for msg_id in ("a", "b", "c", "d"):
        deliver_now(engine, "t", msg_id)
    got = {r.record.msg_id: r for r in receive(engine)}
    assert sorted(got) == ["a", "b", "c", "d"]
    assert len(timer_keys(engine.store)) == 1  # one for the lot of four
    assert ack(engine, [got["a"].receipt]) == [ACKED]
    assert run(engine.nack("t", "g", [got["b"].receipt], 10 * INVISIBLE_MS)) == ["nacked"]
    run(engine.change_invisibility("t", "g", got["c"].receipt, 3 * INVISIBLE_MS))
    clock.advance(INVISIBLE_MS)
    back = receive(engine, wait_ms=10_000)
    assert [(r.record.msg_id, r.attempt) for r in back] == [("d", 2)]
    assert ack(engine, [back[0].receipt]) == [ACKED]
    assert [group_state(engine, seq) for seq in range(3)] == [
        GroupState.ACKED,
        GroupState.RETRYING,
        GroupState.INFLIGHT,
    ]
    clock.advance(2 * INVISIBLE_MS)  # c's own, longer invisibility ends
    again = receive(engine, wait_ms=10_000)
    assert [(r.record.msg_id, r.attempt) for r in again] == [("c", 2)]


def invisibility_timers(engine: Engine) -> list[bytes]:
    return [k for k in timer_keys(engine.store) if invisible.PREFIX.encode() in k]


def test_a_lot_timer_goes_once_nothing_of_its_lot_is_held(engine: Engine, clock: FakeClock) -> None:
    """An ack or nack deletes the invisibility timer it leaves with nothing to fail, found
    from any seq of the lot; while any of the lot is still held, the timer stays and at its
    end fails only those."""
    for msg_id in ("a", "b", "c"):
        deliver_now(engine, "t", msg_id)
    got = {r.record.msg_id: r for r in receive(engine)}
    assert ack(engine, [got["b"].receipt, got["c"].receipt]) == [ACKED, ACKED]
    assert len(invisibility_timers(engine)) == 1  # a is still held
    assert ack(engine, [got["a"].receipt]) == [ACKED]
    assert invisibility_timers(engine) == []  # the last of the lot

    for msg_id in ("d", "e"):
        deliver_now(engine, "t", msg_id)
    got = {r.record.msg_id: r for r in receive(engine)}
    assert ack(engine, [got["d"].receipt]) == [ACKED]
    assert len(invisibility_timers(engine)) == 1  # e is still held: its end must come
    clock.advance(INVISIBLE_MS)
    back = receive(engine, wait_ms=10_000)
    assert [(r.record.msg_id, r.attempt) for r in back] == [("e", 2)]

    nacked = [r.receipt for r in back]
    assert run(engine.nack("t", "g", nacked, 10 * INVISIBLE_MS)) == ["nacked"]
    assert invisibility_timers(engine) == []  # its retry timer decides now
    assert len(timer_keys(engine.store)) == 1


def test_acked_message_does_not_come_back(engine: Engine, clock: FakeClock) -> None:
    deliver_now(engine, "t", "m")
    deliver_now(engine, "t", "n")
    first_held = clock.now_ms()  # a first hold's generation (consume._hold)
    got = receive(engine)
    assert ack(engine, [got[0].receipt]) == [ACKED]
    clock.advance(INVISIBLE_MS)
    again = receive(engine, wait_ms=10_000)
    assert [(r.record.msg_id, r.attempt) for r in again] == [("n", 2)]
    due = clock.now_ms() + INVISIBLE_MS
    wait_until(
        lambda: (
            timer_keys(engine.store)
            == [invisible.timer_key(due, GroupTimer("t", "g", 1, first_held + 1))]
        ),
        what="only n's new invisibility",
    )


def test_a_zero_invisibility_still_comes_back(engine: Engine, clock: FakeClock) -> None:
    # Every timer key must be due after the `now` of the batch that writes it: the scanner's
    # cursor may already be past a key due now (here: past "zzz" at now), and a key behind
    # the cursor would never fire.
    run(engine.send(record("zzz", "later", clock.now_ms() + 1)))
    deliver_now(engine, "t", "m")
    clock.advance(1)
    wait_until(lambda: engine.deliverer.moved == 1, what="zzz's delivery")
    held = run(engine.receive("t", "g", 1, 0, 0))
    assert [r.attempt for r in held] == [1]
    (key,) = timer_keys(engine.store)
    assert keys.decode_timer_key(key).due_ms > clock.now_ms()
    clock.advance(engine.scanner.pace_ms)  # due in 1 ms, moved once the last move's pace ends
    again = receive(engine, wait_ms=10_000)
    assert [(r.record.msg_id, r.attempt) for r in again] == [("m", 2)]


def test_a_receipt_of_one_group_does_not_ack_the_message_another_group_holds(
    engine: Engine,
) -> None:
    """Issue 10.6: these two groups' CRCs collide; their receipts were byte-identical."""
    deliver_now(engine, "rt", "m")
    first = receive(engine, topic="rt", group="g29685295")[0].receipt
    second = receive(engine, topic="rt", group="g32060020")[0].receipt
    assert first != second
    assert ack(engine, [first], topic="rt", group="g32060020") == [UNKNOWN]
    assert ack(engine, [second], topic="rt", group="g29685295") == [UNKNOWN]
    assert ack(engine, [first], topic="rt", group="g29685295") == [ACKED]
