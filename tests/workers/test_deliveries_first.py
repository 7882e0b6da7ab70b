"""Deliveries first (issue 16): a move of due timers waits behind at most one unit of
client work, whoever holds the writer; and sends are refused while deliveries lag."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable

import pytest

from storage import keys
from storage.errors import Overloaded
from storage.records import MessageState, decode_index
from storage.store import CF, Put
from storage.txn import Txn
from tests.workers.conftest import EngineFactory
from tests.workers.support import WAIT_S, Gate, RecordingStore, record, run, wait_until
from workers import writer as writer_module
from workers.clock import FakeClock
from workers.engine import Engine
from workers.writer import (
    CONSUME_PART,
    DRAIN_TURNS,
    GROUP_COMMIT_MAX_ITEMS,
    Writer,
    _ClientQueue,
    _Op,
)


def put_op(key: bytes) -> Callable[[Txn], None]:
    def op(txn: Txn) -> None:
        txn.put(CF.META, key, b"v")

    return op


def commit_order(store: RecordingStore, wanted: set[bytes]) -> list[list[bytes]]:
    """The keys of ``wanted`` each write put, write by write (writes without any left out)."""
    order = []
    for ops, _ in store.writes:
        keys = sorted(op.key for op in ops if isinstance(op, Put) and op.key in wanted)
        if keys:
            order.append(keys)
    return order


def move(writer: Writer, key: bytes, *, is_move: bool = True) -> concurrent.futures.Future[None]:
    """Queue an internal op as the deliverer does when the writer is busy (``is_move``
    false: as the exporter or the sweeper does)."""
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    writer.enqueue_internal(put_op(key), durable=False, future=future, move=is_move)
    return future


def test_a_move_queued_behind_client_work_commits_before_the_rest_of_it(
    writer: Writer, store: RecordingStore
) -> None:
    clients = [b"c0", b"c1", b"c2", b"r0"]

    async def scenario() -> None:
        gate = Gate()
        held = writer.submit(gate.op, durable=True)  # the unit of client work in progress
        gate.wait_entered()
        queued = [writer.submit(put_op(k), durable=True) for k in clients[:3]]
        queued.append(writer.submit(put_op(b"r0"), durable=False))  # a receive: quick too
        moved = move(writer, b"move")
        gate.release.set()
        await asyncio.gather(held, *queued)
        moved.result(10)

    run(scenario())
    assert commit_order(store, {b"move", *clients}) == [[b"move"], [b"r0"], [b"c0", b"c1", b"c2"]]


def test_client_ops_taken_but_not_started_go_back_behind_a_move_that_came_meanwhile(
    writer: Writer, store: RecordingStore
) -> None:
    """The writer commits a take's quick ops first; a move arriving then jumps the rest."""
    moved: list[concurrent.futures.Future[None]] = []

    def receive_then_a_move_falls_due(txn: Txn) -> None:
        txn.put(CF.META, b"r0", b"v")
        moved.append(move(writer, b"move"))

    async def scenario() -> None:
        gate = Gate()
        held = writer.submit(gate.op, durable=False)
        gate.wait_entered()
        durable = [writer.submit(put_op(k), durable=True) for k in (b"c0", b"c1")]
        quick = writer.submit(receive_then_a_move_falls_due, durable=False)
        gate.release.set()
        await asyncio.gather(held, quick, *durable)
        moved[0].result(10)

    run(scenario())
    wanted = {b"r0", b"move", b"c0", b"c1"}
    assert commit_order(store, wanted) == [[b"r0"], [b"move"], [b"c0", b"c1"]]


def test_client_ops_share_a_batch_only_up_to_the_message_bound(
    writer: Writer, store: RecordingStore
) -> None:
    half = GROUP_COMMIT_MAX_ITEMS // 2

    async def scenario() -> None:
        gate = Gate()
        held = writer.submit(gate.op, durable=False)
        gate.wait_entered()
        heavy = [writer.submit(put_op(k), durable=True, weight=half + 1) for k in (b"h0", b"h1")]
        light = [writer.submit(put_op(k), durable=True, weight=half - 1) for k in (b"l0",)]
        gate.release.set()
        await asyncio.gather(held, *heavy, *light)

    run(scenario())
    assert commit_order(store, {b"h0", b"h1", b"l0"}) == [[b"h0"], [b"h1", b"l0"]]


@pytest.mark.parametrize("other_internal_op", [False, True], ids=["alone", "beside_a_sweep"])
def test_a_timer_falling_due_during_client_work_moves_before_the_work_queued_behind_it(
    make_engine: Callable[..., Engine],
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    other_internal_op: bool,
) -> None:
    """The scanner cannot see the timer until the batch in progress ends (the scan
    horizon); the writer keeps the next slot for its move instead of taking the queue,
    even when another worker's op (an export's delete, a retention sweep) is queued
    first (CI, 2026-11-25: it took the slot and the client work went before the move)."""
    monkeypatch.setattr(writer_module, "MOVE_HANDOFF_S", WAIT_S)  # no race with a slow box
    engine = make_engine()
    engine.start()
    now = clock.now_ms()
    seen: list[bytes | None] = []

    def client_op(txn: Txn) -> None:  # what state the timer's message is in when this runs
        seen.append(txn.get(CF.MESSAGES, keys.message_key("t", "due")))

    async def scenario() -> None:
        await engine.send(record("t", "due", now + 100))
        wait_until(lambda: engine.scanner.next_due_ms == now + 100)
        gate = Gate()
        held = engine.writer.submit(gate.op, durable=True)
        gate.wait_entered()
        queued = [engine.writer.submit(client_op, durable=True) for _ in range(3)]
        clock.advance(100)
        wait_until(lambda: engine.writer.move_due, what="the scanner waiting for the batch")
        other = move(engine.writer, b"sweep", is_move=False) if other_internal_op else None
        gate.release.set()
        await asyncio.gather(held, *queued)
        if other is not None:
            other.result(WAIT_S)

    run(scenario())
    # The deliverer counts its move once the writer's call returns on its own thread,
    # which may come after the client ops' replies: what ran first is what they saw.
    wait_until(lambda: engine.deliverer.moved == 1, what="the deliverer's count of its move")
    states = [decode_index(raw).state if raw else None for raw in seen]
    assert states == [MessageState.DELIVERED] * 3


@pytest.mark.parametrize("grows", [False, True], ids=["receive", "send"])
def test_after_a_move_a_waiting_receive_goes_before_the_next_move_and_a_send_does_not(
    writer: Writer,
    store: RecordingStore,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    grows: bool,
) -> None:
    """While timers fall due back to back the scanner always waits on the batch being
    written; had every batch's end kept the next slot for a move, moves would follow one
    another while a receive waited behind them (bench figure 3 (b): receives queued 30-50 ms
    behind chains of moves). After a move, a waiting receive or ack goes first; a send
    waits for the next move still."""
    monkeypatch.setattr(writer_module, "MOVE_HANDOFF_S", WAIT_S)  # a slot kept would show
    client_started = threading.Event()
    second: list[concurrent.futures.Future[None]] = []

    def client_op(txn: Txn) -> None:
        client_started.set()
        txn.put(CF.META, b"c0", b"v")

    def scanner() -> None:  # waits for the move being written, then hands over the next
        writer.wait_horizon(clock.now_ms() + 1, WAIT_S)
        client_started.wait(2.0)  # a writer keeping the slot for it: the move comes first
        second.append(move(writer, b"move2"))

    async def scenario() -> None:
        gate = Gate()
        first: concurrent.futures.Future[None] = concurrent.futures.Future()
        writer.enqueue_internal(gate.op, durable=False, future=first, move=True)
        gate.wait_entered()
        queued = writer.submit(client_op, durable=grows, grows=grows)  # behind the move
        scanning = threading.Thread(target=scanner, name="test-scanner")
        scanning.start()
        wait_until(lambda: writer.move_due, what="the scanner waiting for the move")
        gate.release.set()
        await queued
        scanning.join(WAIT_S)
        first.result(WAIT_S)
        second[0].result(WAIT_S)

    run(scenario())
    order = [[b"move2"], [b"c0"]] if grows else [[b"c0"], [b"move2"]]
    assert commit_order(store, {b"c0", b"move2"}) == order


@pytest.mark.parametrize("grows", [False, True], ids=["receive", "send"])
def test_a_receive_queued_behind_an_inline_move_runs_on_the_movers_thread_right_after_it(
    writer: Writer, grows: bool
) -> None:
    """A receive or ack that finds a move being written inline (the deliverer's thread holds
    the batch lock) runs on that thread right after it, not through a hand-off to the
    writer thread and back (bench figure 3 (b)); a send is the writer thread's, woken
    when the move is done."""
    ran_on: list[str] = []
    gate = Gate()

    def deliverer() -> None:
        writer.call(gate.op, durable=False, inline=True, move=True)

    def client_op(txn: Txn) -> None:
        ran_on.append(threading.current_thread().name)
        txn.put(CF.META, b"c0", b"v")

    async def scenario() -> None:
        mover = threading.Thread(target=deliverer, name="test-deliverer")
        mover.start()
        gate.wait_entered()
        queued = writer.submit(client_op, durable=grows, grows=grows)
        gate.release.set()
        await queued
        mover.join(WAIT_S)

    run(scenario())
    assert ran_on == [Writer.thread_name if grows else "test-deliverer"]


# --- admission control ---------------------------------------------------------------------


def test_sends_are_refused_while_deliveries_lag_and_accepted_once_they_caught_up(
    make_engine: Callable[..., Engine], clock: FakeClock
) -> None:
    engine = make_engine(due_backlog_limit_ms=1_000)
    engine.start()
    now = clock.now_ms()
    writer = engine.writer
    release = threading.Event()

    async def scenario() -> None:
        await engine.send(record("t", "due", now + 100))
        wait_until(lambda: engine.scanner.next_due_ms == now + 100)
        # The writer is held by client work while the timer falls due, and stays held.
        blocker = threading.Thread(
            target=writer.call, args=(lambda _: release.wait(10),), kwargs={"durable": False}
        )
        blocker.start()
        wait_until(lambda: not writer.idle)
        clock.advance(100 + 1_000)  # due, and exactly the limit late: still admitted
        assert engine.lag.age_ms() == 1_000
        assert not engine.lag.lagging()
        clock.advance(1)
        assert engine.lag.lagging()
        assert engine.lag.timers() == 1
        with pytest.raises(Overloaded) as refused:
            engine.lag.admit()
        assert refused.value.retry_after_s >= 1
        assert "behind" in str(refused.value)
        release.set()
        blocker.join(10)
        wait_until(lambda: engine.deliverer.moved == 1)
        wait_until(lambda: engine.lag.age_ms() == 0)
        assert not engine.lag.lagging()
        engine.lag.admit()
        await engine.send(record("t", "later", now + 60_000))

    try:
        run(scenario())
    finally:
        release.set()
    assert engine.lag.refused == 1
    assert engine.status("t", "later").entry.due_ms == now + 60_000


def test_a_batch_send_in_parts_lets_a_move_in_after_its_first_part(
    writer: Writer, store: RecordingStore
) -> None:
    """A request worth several units (a batch send of 1000) is queued as parts: a move that
    falls due while the first part is written commits before the second."""
    moved: list[concurrent.futures.Future[None]] = []

    def first_part(txn: Txn) -> None:
        txn.put(CF.META, b"p0", b"v")
        moved.append(move(writer, b"move"))

    parts: list[tuple[Callable[[Txn], None], int]] = [(first_part, GROUP_COMMIT_MAX_ITEMS)]
    parts += [(put_op(k), GROUP_COMMIT_MAX_ITEMS) for k in (b"p1", b"p2")]

    async def scenario() -> None:
        await asyncio.gather(*writer.submit_parts(parts, durable=True))
        moved[0].result(10)

    run(scenario())
    wanted = {b"p0", b"p1", b"p2", b"move"}
    assert commit_order(store, wanted) == [[b"p0"], [b"move"], [b"p1"], [b"p2"]]


def test_parts_are_refused_together_when_the_queue_is_full(writer: Writer) -> None:
    async def scenario() -> None:
        gate = Gate()
        held = writer.submit(gate.op, durable=False)
        gate.wait_entered()
        queued = [writer.submit(put_op(b"c%d" % i), durable=True) for i in range(writer.queue_size)]
        with pytest.raises(Overloaded):
            writer.submit_parts([(put_op(b"p0"), 1), (put_op(b"p1"), 1)], durable=True)
        assert writer.queue_depth == writer.queue_size  # nothing of the refused request queued
        gate.release.set()
        await asyncio.gather(held, *queued)

    run(scenario())


def test_a_batch_send_bigger_than_a_part_answers_every_item_in_order(engine: Engine) -> None:
    n = 2 * GROUP_COMMIT_MAX_ITEMS + 7
    recs = [record("parts", f"m{i}", 10**15) for i in range(n)]
    recs[GROUP_COMMIT_MAX_ITEMS] = recs[0]  # the same id again, in the second part
    outcomes = run(engine.send_batch(recs))
    assert [o.msg_id for o in outcomes if not isinstance(o, Exception) and o] == [
        r.msg_id for r in recs
    ]
    created = [o.created for o in outcomes if not isinstance(o, Exception) and o]
    assert created.count(False) == 1
    assert created[GROUP_COMMIT_MAX_ITEMS] is False


def test_a_big_receive_and_its_ack_are_taken_in_parts(engine: Engine, clock: FakeClock) -> None:
    """A receive of 1000 or an ack of 800 receipts as one op held the scan horizon 25-35 ms
    (bench figure 10): each is taken in ops of at most CONSUME_PART messages."""
    n = 3 * CONSUME_PART + 5
    run(engine.send_batch([record("t", f"m{i:04}", clock.now_ms()) for i in range(n)]))
    wait_until(lambda: engine.writer.idle, what="the sends are written")
    ops = engine.writer.ops_done
    got = run(engine.receive("t", "g", n + 10, 0, 30_000))
    assert [r.record.msg_id for r in got] == [f"m{i:04}" for i in range(n)]
    assert engine.writer.ops_done - ops == 4  # three full parts and the 5 left
    ops = engine.writer.ops_done
    assert run(engine.ack("t", "g", [r.receipt for r in got])) == ["acked"] * n
    assert engine.writer.ops_done - ops == 4
    assert run(engine.receive("t", "g", n, 0, 30_000)) == []


def test_a_receive_in_parts_stops_at_one_byte_budget_for_the_reply(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    budget = 3 * CONSUME_PART * 1024  # over two parts of 1 KiB messages, under three
    engine = make_engine(max_receive_bytes=budget)
    engine.start()
    n = 4 * CONSUME_PART
    body = b"x" * 1024
    run(engine.send_batch([record("t", f"m{i:04}", clock.now_ms(), body) for i in range(n)]))
    got = run(engine.receive("t", "g", n, 0, 30_000))
    assert CONSUME_PART < len(got) < budget // len(body)  # more than a part, less than a budget
    rest = run(engine.receive("t", "g", n, 0, 30_000))
    assert len(got) + len(rest) <= n
    assert {r.record.msg_id for r in got}.isdisjoint(r.record.msg_id for r in rest)


def test_ops_that_drain_the_store_and_sends_are_taken_in_turns(
    writer: Writer, store: RecordingStore
) -> None:
    """A consumer's receive and ack parts wait behind one of a producer's queued batch parts
    at most, and sends get a unit every DRAIN_TURNS; each kind keeps its order, a unit
    stays in bound."""

    async def scenario() -> None:
        gate = Gate()
        held = writer.submit(gate.op, durable=False)
        gate.wait_entered()
        sends = [
            writer.submit(put_op(k), durable=True, grows=True, weight=GROUP_COMMIT_MAX_ITEMS)
            for k in (b"s0", b"s1", b"s2")
        ]
        drains = writer.submit_parts(
            [(put_op(b"a%d" % i), GROUP_COMMIT_MAX_ITEMS) for i in range(DRAIN_TURNS + 2)],
            durable=True,
        )
        gate.release.set()
        await asyncio.gather(held, *sends, *drains)

    run(scenario())
    drains = [[b"a%d" % i] for i in range(DRAIN_TURNS + 2)]
    wanted = {b"s0", b"s1", b"s2", *(d[0] for d in drains)}
    assert commit_order(store, wanted) == [
        *drains[:DRAIN_TURNS],
        [b"s0"],
        *drains[DRAIN_TURNS:],
        [b"s1"],
        [b"s2"],
    ]


def test_a_consumers_turn_after_a_move_is_one_of_the_drains_turns() -> None:
    """Receives and acks that go before the next move take a turn of theirs: after
    DRAIN_TURNS of them it is a waiting send's turn (taken out of turn, they starved the
    producer under bench figure 10 (c): 0.03 of its rate alone)."""
    queue = _ClientQueue()

    def op(grows: bool) -> _Op:
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        return _Op(put_op(b"k"), True, future, grows, GROUP_COMMIT_MAX_ITEMS)

    drains = [op(False) for _ in range(DRAIN_TURNS + 1)]
    send = op(True)
    queue.extend([*drains, send])
    for drain in drains[:DRAIN_TURNS]:
        assert queue.drains_turn
        assert queue.take(GROUP_COMMIT_MAX_ITEMS, drains_only=True) == [drain]
    assert not queue.drains_turn
    assert queue.take(GROUP_COMMIT_MAX_ITEMS) == [send]
    assert queue.drains_turn
