"""move_due (workers/ops/move.py): the atomic move of due timers into topic logs
(invariants 2 and 4), driven through a Writer on a real store, without the scanner."""

from __future__ import annotations

import concurrent.futures
import queue

import pytest

from storage import keys
from storage.errors import StorageError
from storage.records import MessageState, decode_counts, decode_index
from storage.store import CF, Delete, DeleteRange, Put
from storage.txn import Txn
from tests.workers.support import (
    TIMER_END,
    Gate,
    RecordingStore,
    call,
    record,
    timer_keys,
    topic_log,
    wait_until,
)
from workers.clock import FakeClock
from workers.deliverer import Deliverer
from workers.ops import messages
from workers.ops.move import RANGE_DELETE_MIN, move_due
from workers.scanner import Chunk
from workers.writer import Writer


def index_state(store: RecordingStore, topic: str, msg_id: str) -> MessageState:
    raw = store.get(CF.MESSAGES, keys.message_key(topic, msg_id))
    assert raw is not None
    return decode_index(raw).state


def schedule(writer: Writer, topic: str, msg_id: str, due: int) -> None:
    rec = record(topic, msg_id, due)
    outcome = call(writer, lambda txn: messages.send(txn, rec), durable=True)
    assert outcome.state is MessageState.SCHEDULED


def due_entries(store: RecordingStore) -> list[tuple[bytes, bytes]]:
    return store.scan(CF.TIMERS, b"", TIMER_END, 10_000)


def test_move_skips_a_message_cancelled_after_the_scan(
    writer: Writer, store: RecordingStore, clock: FakeClock
) -> None:
    due = clock.now_ms() + 100
    for msg_id in ("a", "b", "c"):
        schedule(writer, "t", msg_id, due)
    scanned = due_entries(store)
    assert len(scanned) == 3
    call(writer, lambda txn: messages.cancel(txn, "t", "b"), durable=True)
    clock.advance(100)

    moved = call(writer, lambda txn: move_due(txn, scanned), durable=False)

    assert moved == 2
    assert [r.msg_id for r in topic_log(store, "t")] == ["a", "c"]
    assert index_state(store, "t", "b") is MessageState.CANCELLED
    assert index_state(store, "t", "a") is MessageState.DELIVERED
    assert timer_keys(store) == []
    assert writer.pending_timers == 0
    assert store.get(CF.META, keys.WATERMARK_KEY) == keys.successor(scanned[-1][0])


def test_move_records_where_each_message_went(
    writer: Writer, store: RecordingStore, clock: FakeClock
) -> None:
    due = clock.now_ms() + 10
    schedule(writer, "t", "a", due)
    schedule(writer, "u", "a", due)
    clock.advance(25)
    call(writer, lambda txn: move_due(txn, due_entries(store)), durable=False)
    for topic in ("t", "u"):
        status = messages.status(store, topic, "a")
        assert status.entry.state is MessageState.DELIVERED
        assert status.entry.seq == 0
        assert status.entry.done_at_ms == due + 15
        assert status.record is not None
        assert status.record.topic == topic
        assert status.record.delivered_at_ms == due + 15


def test_a_failed_move_leaves_every_message_a_timer(
    writer: Writer, store: RecordingStore, clock: FakeClock
) -> None:
    due = clock.now_ms() + 10
    for msg_id in ("a", "b"):
        schedule(writer, "t", msg_id, due)
    clock.advance(10)
    scanned = due_entries(store)
    store.fail_writes = 1

    with pytest.raises(StorageError):
        call(writer, lambda txn: move_due(txn, scanned), durable=False)

    assert timer_keys(store) == [k for k, _ in scanned]
    assert index_state(store, "t", "a") is MessageState.SCHEDULED
    assert topic_log(store, "t") == []
    assert store.get(CF.META, keys.WATERMARK_KEY) is None
    assert store.get(CF.META, keys.next_seq_key(keys.topic_lane("t"))) is None
    assert writer.pending_timers == 2

    assert call(writer, lambda txn: move_due(txn, scanned), durable=False) == 2
    assert [r.msg_id for r in topic_log(store, "t")] == ["a", "b"]
    assert writer.pending_timers == 0


@pytest.mark.parametrize("count", [5, RANGE_DELETE_MIN])
def test_each_move_is_one_write_batch(
    writer: Writer, store: RecordingStore, clock: FakeClock, count: int
) -> None:
    due = clock.now_ms() + 10
    for i in range(count):
        schedule(writer, "t", f"m{i:04d}", due)
    clock.advance(10)
    scanned = due_entries(store)
    writes_before = len(store.writes)
    call(writer, lambda txn: move_due(txn, scanned), durable=False)
    assert len(store.writes) == writes_before + 1
    ops, _ = store.writes[-1]
    timer_ops = [op for op in ops if op.cf == CF.TIMERS]
    if count >= RANGE_DELETE_MIN:
        # One range tombstone for the whole span instead of a point delete per timer,
        # written with the log appends and index updates.
        span = DeleteRange(CF.TIMERS, scanned[0][0], keys.successor(scanned[-1][0]))
        assert timer_ops == [span]
    else:
        # A short span: point deletes (range tombstones in the memtable slow every scan).
        assert sorted(timer_ops) == sorted(Delete(CF.TIMERS, k) for k, _ in scanned)
    log_puts = [op for op in ops if isinstance(op, Put) and op.cf == CF.LOGS]
    index_puts = [op for op in ops if isinstance(op, Put) and op.cf == CF.MESSAGES]
    assert len(log_puts) == len(index_puts) == count
    assert Put(CF.META, keys.WATERMARK_KEY, keys.successor(scanned[-1][0])) in ops


def test_deliverer_retries_a_failed_move(
    writer: Writer, store: RecordingStore, clock: FakeClock
) -> None:
    due = clock.now_ms() + 10
    schedule(writer, "t", "a", due)
    clock.advance(10)
    put_queue: queue.Queue[Chunk] = queue.Queue(maxsize=2)
    put_queue.put(Chunk(due_entries(store)))
    store.fail_writes = 1
    deliverer = Deliverer(writer, put_queue)
    deliverer.start()
    try:
        wait_until(lambda: deliverer.moved == 1, what="the retried move")
    finally:
        deliverer.stop()
    assert deliverer.failures == 1
    assert deliverer.batches == 1
    assert deliverer.error is None
    assert [r.msg_id for r in topic_log(store, "t")] == ["a"]
    assert timer_keys(store) == []


def test_a_cancel_after_the_scans_mark_is_seen_by_the_move(
    writer: Writer, store: RecordingStore, clock: FakeClock
) -> None:
    due = clock.now_ms() + 10
    for msg_id in ("a", "b"):
        schedule(writer, "t", msg_id, due)
    clock.advance(10)
    mark = writer.cancels_committed  # what the scanner reads before its scan
    scanned = due_entries(store)
    call(writer, lambda txn: messages.cancel(txn, "t", "b"), durable=True)
    assert writer.cancels_committed != mark

    moved = call(writer, lambda txn: move_due(txn, scanned, mark), durable=False)

    assert moved == 1
    assert [r.msg_id for r in topic_log(store, "t")] == ["a"]
    assert index_state(store, "t", "b") is MessageState.CANCELLED


def test_a_cancel_staged_earlier_in_the_same_batch_is_seen_by_the_move(
    writer: Writer, store: RecordingStore, clock: FakeClock
) -> None:
    due = clock.now_ms() + 10
    for msg_id in ("a", "b"):
        schedule(writer, "t", msg_id, due)
    clock.advance(10)
    mark = writer.cancels_committed
    scanned = due_entries(store)
    gate = Gate()
    held: concurrent.futures.Future[None] = concurrent.futures.Future()
    writer.enqueue_internal(gate.op, durable=False, future=held)
    gate.wait_entered()
    cancelled: concurrent.futures.Future[messages.CancelOutcome] = concurrent.futures.Future()
    move: concurrent.futures.Future[int] = concurrent.futures.Future()
    # Both as client ops of the same durability (the writer commits ops that need no fsync
    # apart from the others), so that they run in this order within one batch.
    writer.enqueue_internal(
        lambda txn: messages.cancel(txn, "t", "b"), durable=False, future=cancelled, internal=False
    )
    writer.enqueue_internal(
        lambda txn: move_due(txn, scanned, mark),
        durable=False,
        future=move,
        internal=False,
    )
    batches = writer.batches
    gate.release.set()
    assert move.result(timeout=10) == 1
    assert cancelled.result(timeout=10).msg_id == "b"
    assert writer.batches == batches + 2  # the gate's batch, then cancel + move together
    assert [r.msg_id for r in topic_log(store, "t")] == ["a"]
    assert index_state(store, "t", "b") is MessageState.CANCELLED
    assert writer.pending_timers == 0


def test_with_no_cancel_since_the_mark_every_scanned_message_moves(
    writer: Writer, store: RecordingStore, clock: FakeClock
) -> None:
    due = clock.now_ms() + 10
    schedule(writer, "t", "gone", due)
    call(writer, lambda txn: messages.cancel(txn, "t", "gone"), durable=True)
    for msg_id in ("a", "b"):
        schedule(writer, "t", msg_id, due)
    clock.advance(10)
    mark = writer.cancels_committed
    scanned = due_entries(store)
    assert len(scanned) == 2  # the cancelled one's timer was deleted with its tombstone
    assert call(writer, lambda txn: move_due(txn, scanned, mark), durable=False) == 2
    assert [r.msg_id for r in topic_log(store, "t")] == ["a", "b"]
    for msg_id in ("a", "b"):
        status = messages.status(store, "t", msg_id)
        assert status.entry.state is MessageState.DELIVERED
        assert status.record is not None
        assert status.record.delivered_at_ms == due


def test_an_undecodable_group_timer_is_skipped_not_fatal(
    writer: Writer, store: RecordingStore, clock: FakeClock
) -> None:
    due = clock.now_ms() + 10
    schedule(writer, "t", "a", due)
    bad = keys.timer_key(due, keys.INVISIBLE_PREFIX + "g", b"no-separator-here")
    store.write([Put(CF.TIMERS, bad, b"")], sync=True)
    clock.advance(10)
    scanned = due_entries(store)
    assert len(scanned) == 2
    assert call(writer, lambda txn: move_due(txn, scanned), durable=False) == 1
    assert [r.msg_id for r in topic_log(store, "t")] == ["a"]


def test_a_move_updates_each_topics_counts_once_in_its_own_batch(
    writer: Writer, store: RecordingStore, clock: FakeClock
) -> None:
    due = clock.now_ms() + 100
    for i in range(600):
        schedule(writer, "a" if i % 3 else "b", f"m{i}", due)
    clock.advance(100)
    staged: list[dict[bytes, tuple[int, int, int]]] = []

    def move(txn: Txn) -> int:
        moved = move_due(txn, due_entries(store))
        staged.append(dict(txn.counts))
        return moved

    writes_before = len(store.writes)
    assert call(writer, move, durable=False) == 600
    assert staged == [
        {keys.topic_counts_key("a"): (-400, 400, 0), keys.topic_counts_key("b"): (-200, 200, 0)}
    ]
    assert len(store.writes) == writes_before + 1  # the counts rode in the move's batch
    counts = {t: decode_counts(store.get(CF.META, keys.topic_counts_key(t))) for t in "ab"}
    assert counts == {"a": (0, 400, 0), "b": (0, 200, 0)}
