"""Txn (read-your-writes, savepoints) and the Writer (group commit, isolation of failing ops,
back-pressure, durability before the reply, the scan horizon)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

import pytest

from storage import keys
from storage.errors import Overloaded, RocktimerError, StorageError, WriterStopped
from storage.keys import PENDING_KEY
from storage.records import MessageRecord, MessageState, decode_counts
from storage.store import CF, Put
from storage.txn import Txn
from tests.workers.support import (
    WAIT_S,
    Gate,
    RecordingStore,
    call,
    record,
    run,
    timer_keys,
    topic_log,
    wait_until,
)
from workers.clock import FakeClock
from workers.ops import messages
from workers.ops.messages import SendOutcome
from workers.timers import message
from workers.writer import GROUP_COMMIT_MAX_ITEMS, Writer


def put_op(cf: str, key: bytes, value: bytes) -> Callable[[Txn], None]:
    def op(txn: Txn) -> None:
        txn.put(cf, key, value)

    return op


def send_op(rec: MessageRecord) -> Callable[[Txn], messages.SendOutcome]:
    return lambda txn: messages.send(txn, rec)


# --- Txn ---------------------------------------------------------------------------------


def test_txn_reads_its_own_writes_over_the_store(store: RecordingStore) -> None:
    store.write([Put(CF.META, b"a", b"1"), Put(CF.META, b"b", b"2")], sync=False)
    txn = Txn(store, 0)
    txn.put(CF.META, b"a", b"10")
    txn.delete(CF.META, b"b")
    txn.put(CF.META, b"c", b"3")
    assert txn.get(CF.META, b"a") == b"10"
    assert txn.get(CF.META, b"b") is None
    assert txn.get(CF.META, b"c") == b"3"
    assert txn.get(CF.LOGS, b"c") is None  # staged in another column family
    assert txn.get_many(CF.META, [b"c", b"zz", b"b", b"a"]) == [b"3", None, None, b"10"]
    assert txn.get_many(CF.LOGS, [b"a"]) == [None]
    assert store.get(CF.META, b"a") == b"1"  # nothing written before the commit

    txn.commit(0)
    assert store.get_many(CF.META, [b"a", b"b", b"c"]) == [b"10", None, b"3"]
    assert store.writes[-1][1] is False  # nobody asked for durability


def test_txn_rollback_undoes_only_what_was_staged_after_the_savepoint(
    store: RecordingStore,
) -> None:
    store.write([Put(CF.META, b"kept", b"store"), Put(CF.TIMERS, b"timer", b"v")], sync=False)
    txn = Txn(store, 0)
    txn.put(CF.META, b"a", b"first")
    txn.add_pending(1)
    point = txn.savepoint()

    txn.put(CF.META, b"a", b"second")
    txn.put(CF.META, b"b", b"new")
    txn.delete(CF.META, b"kept")
    txn.delete_range(CF.TIMERS, b"", b"\xff")
    txn.add_pending(5)
    txn.rollback(point)

    assert txn.get(CF.META, b"a") == b"first"
    assert txn.get(CF.META, b"b") is None
    assert txn.get(CF.META, b"kept") == b"store"
    assert txn.pending_delta == 1
    txn.commit(7)
    assert store.get(CF.META, b"a") == b"first"
    assert store.get(CF.META, b"b") is None
    assert store.get(CF.META, b"kept") == b"store"
    assert store.get(CF.TIMERS, b"timer") == b"v"  # the range delete was rolled back
    assert store.get(CF.META, PENDING_KEY) == keys.u64(7)


def test_txn_put_many_reads_back_and_rolls_back_as_puts_one_by_one(
    store: RecordingStore,
) -> None:
    txn = Txn(store, 0)
    txn.put(CF.LOGS, b"a", b"before")
    point = txn.savepoint()
    txn.put_many(CF.LOGS, [(b"a", b"x"), (b"b", b"y"), (b"b", b"z")])
    assert (txn.get(CF.LOGS, b"a"), txn.get(CF.LOGS, b"b")) == (b"x", b"z")  # the last wins
    txn.put(CF.LOGS, b"c", b"after")
    txn.rollback(point)
    assert txn.get(CF.LOGS, b"a") == b"before"
    assert txn.get(CF.LOGS, b"b") is None
    assert txn.get(CF.LOGS, b"c") is None
    txn.put_many(CF.LOGS, [(b"b", b"kept")])
    txn.commit(0)
    assert store.get(CF.LOGS, b"a") == b"before"
    assert store.get(CF.LOGS, b"b") == b"kept"


@pytest.mark.parametrize("spread", [1, 5], ids=["close: one scan", "scattered: multi-get"])
def test_txn_get_seqs_reads_as_get_many_does(store: RecordingStore, spread: int) -> None:
    """Seqs close together are read with one bounded scan, scattered ones with a multi-get:
    either way each value is the store's as this batch left it (staged, deleted, missing),
    and nothing outside the prefix is read."""
    lane = b"t\x00"
    seqs = [s * spread for s in (3, 0, 1, 4, 9)]
    store.write([Put(CF.LOGS, lane + keys.u64(s), b"v%d" % s) for s in seqs], sync=False)
    store.write([Put(CF.LOGS, b"u\x00" + keys.u64(2 * spread), b"other lane")], sync=False)
    txn = Txn(store, 0)
    txn.delete(CF.LOGS, lane + keys.u64(spread))  # deleted in this batch
    txn.put(CF.LOGS, lane + keys.u64(4 * spread), b"new")  # changed in this batch
    txn.put(CF.LOGS, lane + keys.u64(7 * spread), b"staged only")  # not in the store yet
    wanted = [9 * spread, 2 * spread, spread, 4 * spread, 7 * spread, 0, 3 * spread, 8 * spread]
    expected = txn.get_many(CF.LOGS, [lane + keys.u64(s) for s in wanted])
    assert txn.get_seqs(CF.LOGS, lane, wanted) == expected
    v9, v3 = b"v%d" % (9 * spread), b"v%d" % (3 * spread)
    assert expected == [v9, None, None, b"new", b"staged only", b"v0", v3, None]
    assert txn.get_seqs(CF.LOGS, lane, []) == []


def test_txn_counts_roll_back_with_their_op_and_add_up_across_commits(
    store: RecordingStore,
) -> None:
    topic_key, group_key = keys.topic_counts_key("t"), keys.group_counts_key("t", "g")
    txn = Txn(store, 0)
    txn.count_topic("t", scheduled=1)
    txn.note("acks")
    point = txn.savepoint()
    txn.count_topic("t", scheduled=2, cancelled=1)
    txn.count_group("t", "g", dead=1)
    txn.note("acks", 5)
    txn.rollback(point)
    assert txn.counts == {topic_key: (1, 0, 0)}
    assert txn.tallies == {"acks": 1}
    assert txn.pending_delta == 1
    txn.commit(1)
    assert len(store.writes) == 1  # the counts rode in the batch of the change

    again = Txn(store, 0)
    again.count_topic("t", scheduled=-1, delivered=1)
    again.count_group("t", "g", inflight=1)
    again.commit(0)
    assert decode_counts(store.get(CF.META, topic_key)) == (0, 1, 0)
    assert decode_counts(store.get(CF.META, group_key)) == (1, 0, 0)


def test_txn_has_any_looks_past_the_keys_its_batch_deleted(store: RecordingStore) -> None:
    """A scan of one key may find only one the batch deleted: has_any reads on."""
    store.write([Put(CF.MESSAGES, b"t\x00m%03d" % i, b"x") for i in range(200)], sync=False)
    txn = Txn(store, 0)
    for i in range(150):
        txn.delete(CF.MESSAGES, b"t\x00m%03d" % i)
    assert txn.has_any(CF.MESSAGES, b"t\x00", b"t\x01")
    for i in range(150, 200):
        txn.delete(CF.MESSAGES, b"t\x00m%03d" % i)
    assert not txn.has_any(CF.MESSAGES, b"t\x00", b"t\x01")
    txn.put(CF.MESSAGES, b"t\x00new", b"x")
    assert txn.has_any(CF.MESSAGES, b"t\x00", b"t\x01")
    assert not txn.has_any(CF.MESSAGES, b"u\x00", b"u\x01")


def test_txn_dropped_counts_stay_dropped_and_count_again_from_zero(
    store: RecordingStore,
) -> None:
    key = keys.group_counts_key("t", "g")
    first = Txn(store, 0)
    first.count_group("t", "g", inflight=2)
    first.commit(0)
    txn = Txn(store, 0)
    txn.count_group("t", "g", inflight=-2)
    assert txn.counted(key) == (0, 0, 0)
    point = txn.savepoint()
    txn.drop_counts(key)
    txn.rollback(point)  # undone with its op
    assert txn.counted(key) == (0, 0, 0)
    assert decode_counts(txn.get(CF.META, key)) == (2, 0, 0)
    txn.drop_counts(key)
    txn.commit(0)
    assert store.get(CF.META, key) is None  # not written back as (0, 0, 0) at commit
    again = Txn(store, 0)
    again.drop_counts(key)
    again.count_group("t", "g", retrying=1)  # a later op of the batch counts it anew
    again.commit(0)
    assert decode_counts(store.get(CF.META, key)) == (0, 1, 0)


def test_txn_commit_keeps_a_key_put_inside_a_range_deleted_in_the_same_batch(
    store: RecordingStore,
) -> None:
    store.write([Put(CF.TIMERS, bytes([i]), b"old") for i in range(10)], sync=False)
    txn = Txn(store, 0)
    txn.put(CF.TIMERS, bytes([3]), b"new")
    txn.delete(CF.TIMERS, bytes([12]))
    txn.delete_range(CF.TIMERS, bytes([0]), bytes([10]))
    assert not txn.empty
    assert Txn(store, 0).empty
    txn.commit(0)
    assert store.scan(CF.TIMERS, b"", b"\xff", 100) == [(bytes([3]), b"new")]
    assert len(store.writes) == 2  # the setup's write, then the whole Txn as one batch


# --- Writer: group commit ----------------------------------------------------------------


def test_ops_of_one_group_commit_read_each_others_writes(writer: Writer) -> None:
    async def scenario() -> tuple[bytes | None, messages.SendOutcome, messages.SendOutcome]:
        gate = Gate()
        held = writer.submit(gate.op, durable=False)
        gate.wait_entered()
        # All durable: the writer commits ops that need no fsync apart from the others.
        put = writer.submit(put_op(CF.META, b"k", b"v"), durable=True)
        read = writer.submit(lambda txn: txn.get(CF.META, b"k"), durable=True)
        rec = record("t", "dup", writer.clock.now_ms() + 1_000)
        first = writer.submit(lambda txn: messages.send(txn, rec), durable=True)
        second = writer.submit(lambda txn: messages.send(txn, rec), durable=True)
        gate.release.set()
        await held
        await put
        return await read, await first, await second

    value, first, second = run(scenario())
    assert writer.batches == 2  # the gate's, then the four ops in one batch
    assert value == b"v"
    assert first.created
    assert not second.created  # the duplicate saw the first send, staged in the same batch
    assert second.deliver_at_ms == first.deliver_at_ms
    assert writer.pending_timers == 1


class Boom(RocktimerError):
    pass


def test_a_failing_op_rolls_back_only_its_own_writes(writer: Writer, store: RecordingStore) -> None:
    store.write([Put(CF.TIMERS, b"t1", b"v"), Put(CF.TIMERS, b"t2", b"v")], sync=False)

    def bad(txn: Txn) -> None:
        txn.put(CF.META, b"a", b"from-bad")  # overwrites a write of the op before
        txn.put(CF.META, b"b", b"from-bad")
        txn.delete_range(CF.TIMERS, b"t0", b"t9")
        txn.add_pending(5)
        raise Boom("no")

    def crash(txn: Txn) -> None:
        txn.put(CF.META, b"d", b"from-crash")
        raise ValueError("a bug, not a domain error")

    async def scenario() -> list[Any]:
        gate = Gate()
        held = writer.submit(gate.op, durable=False)
        gate.wait_entered()
        futures = [
            writer.submit(put_op(CF.META, b"a", b"from-ok"), durable=True),
            writer.submit(bad, durable=True),
            writer.submit(crash, durable=True),
            writer.submit(put_op(CF.META, b"c", b"from-ok"), durable=True),
        ]
        gate.release.set()
        await held
        return await asyncio.gather(*futures, return_exceptions=True)

    results = run(scenario())
    assert writer.batches == 2
    assert results[0] is None
    assert isinstance(results[1], Boom)
    assert isinstance(results[2], ValueError)
    assert results[3] is None
    assert store.get(CF.META, b"a") == b"from-ok"
    assert store.get(CF.META, b"b") is None
    assert store.get(CF.META, b"d") is None
    assert store.get(CF.META, b"c") == b"from-ok"
    assert timer_keys(store) == [b"t1", b"t2"]
    assert writer.pending_timers == 0
    assert store.get(CF.META, PENDING_KEY) is None


def test_many_concurrent_durable_ops_share_one_synced_write(
    writer: Writer, store: RecordingStore
) -> None:
    n = GROUP_COMMIT_MAX_ITEMS  # single sends, as many as one batch takes
    now = writer.clock.now_ms()
    recs = [record("t", f"m{i}", now + 1_000 + i) for i in range(n)]
    durable_at_reply: list[bool] = []

    def synced_write_holds(index_key: bytes) -> bool:
        return any(
            store.durable(i) and any(isinstance(op, Put) and op.key == index_key for op in ops)
            for i, (ops, _) in enumerate(store.writes)
        )

    def check_on_reply(index_key: bytes) -> Callable[[asyncio.Future[SendOutcome]], None]:
        def on_done(_: asyncio.Future[SendOutcome]) -> None:
            durable_at_reply.append(synced_write_holds(index_key))

        return on_done

    async def scenario() -> list[messages.SendOutcome]:
        gate = Gate()
        held = writer.submit(gate.op, durable=False)
        gate.wait_entered()
        futures = []
        for rec in recs:
            fut = writer.submit(send_op(rec), durable=True)
            fut.add_done_callback(check_on_reply(keys.message_key(rec.topic, rec.msg_id)))
            futures.append(fut)
        gate.release.set()
        await held
        return await asyncio.gather(*futures)

    outcomes = run(scenario())
    assert all(o.created for o in outcomes)
    assert writer.batches == 2 < n
    assert writer.ops_done == n + 1
    assert len(store.writes) == 1  # the gate's batch wrote nothing; the sends wrote once
    assert store.durable(0)
    assert durable_at_reply == [True] * n  # every reply came after the synced write
    assert writer.pending_timers == n
    assert store.get(CF.META, PENDING_KEY) == keys.u64(n)


def test_non_durable_ops_write_without_sync(writer: Writer, store: RecordingStore) -> None:
    call(writer, put_op(CF.META, b"x", b"1"), durable=False)
    assert not store.durable(len(store.writes) - 1)  # answered without waiting for a sync
    call(writer, put_op(CF.META, b"y", b"1"), durable=True)
    assert store.durable(len(store.writes) - 1)


def test_the_writer_goes_on_during_an_fsync_and_durable_replies_wait_for_it(
    writer: Writer, store: RecordingStore
) -> None:
    """The WAL sync runs on the syncer thread: quick ops commit and answer meanwhile; every
    durable reply, also a re-send that wrote nothing, waits until a sync covered it."""
    now = writer.clock.now_ms()
    rec = record("t", "m", now + 1_000)
    store.hold_syncs = threading.Event()

    async def scenario() -> tuple[list[bool], SendOutcome, SendOutcome]:
        first = writer.submit(send_op(rec), durable=True)
        await asyncio.to_thread(wait_until, lambda: len(store.writes) == 1, what="the write")
        again = writer.submit(send_op(rec), durable=True)  # answers from the unsynced write
        await writer.submit(put_op(CF.META, b"quick", b"1"), durable=False)
        waiting = [first.done(), again.done()]
        assert store.hold_syncs is not None
        store.hold_syncs.set()
        return waiting, await first, await again

    waiting, first, again = run(scenario())
    assert waiting == [False, False]  # the quick op was answered while both waited
    assert first.created
    assert not again.created
    assert store.durable(0)
    assert store.get(CF.META, b"quick") == b"1"


def test_a_failed_fsync_fails_its_replies_and_the_store_is_reopened(
    writer: Writer, store: RecordingStore
) -> None:
    now = writer.clock.now_ms()
    store.fail_syncs = 1
    with pytest.raises(StorageError):
        call(writer, send_op(record("t", "m0", now + 5)), durable=True)
    retry = call(writer, send_op(record("t", "m1", now + 5)), durable=True)
    assert retry.created
    assert store.reopens == 1
    assert store.durable(len(store.writes) - 1)
    assert writer.alive


def put_noting_thread(ran_on: list[int]) -> Callable[[Txn], None]:
    """An op that writes one key and notes the thread it ran on."""

    def op(txn: Txn) -> None:
        ran_on.append(threading.get_ident())
        txn.put(CF.META, b"inline", b"1")

    return op


def test_an_inline_op_runs_on_the_event_loop_when_the_writer_is_idle(
    writer: Writer, store: RecordingStore
) -> None:
    ran_on: list[int] = []

    async def scenario() -> bool:
        fut = writer.submit(put_noting_thread(ran_on), durable=False, inline=True)
        done_at_once = fut.done()  # answered in the call: no hop to the writer and back
        await fut
        return done_at_once

    assert run(scenario())
    assert ran_on == [threading.get_ident()]  # asyncio.run's loop runs on this thread
    assert store.get(CF.META, b"inline") == b"1"
    assert writer.batches == 1


def test_an_inline_op_queues_while_the_writer_is_busy_and_durable_ones_wait_for_the_sync(
    writer: Writer, store: RecordingStore
) -> None:
    ran_on: list[int] = []
    op = put_noting_thread(ran_on)

    async def scenario() -> tuple[bool, bool]:
        gate = Gate()
        held = writer.submit(gate.op, durable=False)
        gate.wait_entered()
        queued = writer.submit(op, durable=False, inline=True)  # the writer holds the batch
        gate.release.set()
        await held
        await queued
        wait_until(lambda: writer.idle)  # its thread answers a moment before it is done
        store.hold_syncs = threading.Event()
        durable = writer.submit(op, durable=True, inline=True)
        # Once its WAL sync is under way (and held), the reply must still be pending.
        assert await asyncio.to_thread(store.sync_held.wait, WAIT_S), "no WAL sync began"
        await asyncio.sleep(0)  # a reply sent before the sync would be done by now
        waited = not durable.done()
        store.hold_syncs.set()
        await durable
        return waited, store.durable(len(store.writes) - 1)

    waited, synced = run(scenario())
    assert waited  # written inline, answered only after the WAL sync
    assert synced
    assert ran_on[0] != threading.get_ident()  # the busy writer ran the first one
    assert ran_on[1] == threading.get_ident()  # … the idle one let the loop run the second


def test_a_worker_threads_inline_call_runs_on_that_thread_unless_the_writer_is_busy(
    writer: Writer, store: RecordingStore
) -> None:
    """The deliverer's moves: run on its own thread when the writer is idle."""
    ran_on: list[int] = []
    op = put_noting_thread(ran_on)
    worker: list[int] = []

    def from_a_worker() -> None:
        worker.append(threading.get_ident())
        writer.call(op, durable=False, inline=True)

    thread = threading.Thread(target=from_a_worker)
    thread.start()
    thread.join(10)
    gate = Gate()
    held: concurrent.futures.Future[None] = concurrent.futures.Future()
    writer.enqueue_internal(gate.op, durable=False, future=held)
    gate.wait_entered()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        busy = pool.submit(writer.call, op, durable=False, inline=True)
        gate.release.set()
        busy.result(10)
    (writer_thread,) = [t for t in threading.enumerate() if t.name == "rocktimer-writer"]
    assert ran_on[0] == worker[0]  # idle writer: the calling thread wrote the batch
    assert ran_on[1] == writer_thread.ident  # busy: queued to the writer thread
    assert store.get(CF.META, b"inline") == b"1"


def test_parts_of_single_sends_count_one_request_a_message(
    store: RecordingStore, clock: FakeClock
) -> None:
    """Single sends sent together (Engine.send) are one op, but the queue's bound counts
    each: a full queue refuses what it would have refused one send at a time."""
    writer = Writer(store, clock, queue_size=4)
    writer.start()
    try:

        async def scenario() -> None:
            gate = Gate()
            held = writer.submit(gate.op, durable=False)
            gate.wait_entered()
            three = writer.submit_parts(
                [(put_op(CF.META, b"three", b"v"), 3)], durable=False, per_message=True
            )
            assert writer.queue_depth == 3
            writer.check_room()  # one more fits
            with pytest.raises(Overloaded):
                writer.check_room(1)  # one more waiting for its turn, and this one: no
            with pytest.raises(Overloaded):
                writer.submit_parts(
                    [(put_op(CF.META, b"two", b"v"), 2)], durable=False, per_message=True
                )
            batch = writer.submit_parts([(put_op(CF.META, b"part", b"v"), 3)], durable=False)
            assert writer.queue_depth == 4  # a batch send's part: one request
            gate.release.set()
            await held
            await asyncio.gather(*three, *batch)
            assert writer.queue_depth == 0

        run(scenario())
        assert store.get(CF.META, b"two") is None
    finally:
        Gate.release_all()
        writer.stop()


def test_submit_raises_overloaded_when_the_client_queue_is_full(
    store: RecordingStore, clock: FakeClock
) -> None:
    writer = Writer(store, clock, queue_size=3)
    writer.start()
    try:

        async def scenario() -> list[None]:
            gate = Gate()
            held = writer.submit(gate.op, durable=False)
            gate.wait_entered()
            assert writer.queue_depth == 0
            queued = [
                writer.submit(put_op(CF.META, bytes([i]), b"v"), durable=False) for i in range(3)
            ]
            with pytest.raises(Overloaded) as exc:
                writer.submit(put_op(CF.META, b"refused", b"v"), durable=False)
            assert exc.value.retry_after_s >= 1
            assert writer.queue_depth == 3
            gate.release.set()
            await held
            done = await asyncio.gather(*queued)
            await writer.submit(put_op(CF.META, b"later", b"v"), durable=False)
            return done

        assert run(scenario()) == [None, None, None]
        assert store.get(CF.META, b"refused") is None
        assert store.get_many(CF.META, [b"\x00", b"\x01", b"\x02", b"later"]) == [b"v"] * 4
    finally:
        Gate.release_all()
        writer.stop()


def test_a_failed_commit_fails_every_op_of_the_batch_and_writes_nothing(
    writer: Writer, store: RecordingStore
) -> None:
    now = writer.clock.now_ms()
    store.fail_writes = 1

    async def scenario() -> list[Any]:
        gate = Gate()
        held = writer.submit(gate.op, durable=False)
        gate.wait_entered()
        futures = [
            writer.submit(send_op(record("t", f"m{i}", now + 5)), durable=True) for i in range(3)
        ]
        gate.release.set()
        await held
        return await asyncio.gather(*futures, return_exceptions=True)

    results = run(scenario())
    assert all(isinstance(r, StorageError) for r in results)
    assert writer.pending_timers == 0
    assert timer_keys(store) == []
    assert store.get(CF.MESSAGES, keys.message_key("t", "m0")) is None
    # The writer survives a failed commit; the retried send is a fresh one.
    retry = call(writer, lambda txn: messages.send(txn, record("t", "m0", now + 5)), durable=True)
    assert retry.created
    assert writer.pending_timers == 1


def test_a_commit_failing_with_any_error_fails_its_batch_and_the_writer_goes_on(
    writer: Writer, store: RecordingStore
) -> None:
    store.failure = OverflowError("not a StorageError")
    store.fail_writes = 1
    with pytest.raises(OverflowError):
        call(writer, put_op(CF.META, b"a", b"1"), durable=False)
    assert store.get(CF.META, b"a") is None
    assert call(writer, put_op(CF.META, b"b", b"1"), durable=False) is None
    assert store.get(CF.META, b"b") == b"1"
    assert writer.running


def test_meta_values_kept_across_batches_are_what_the_commits_left(
    writer: Writer, store: RecordingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer keeps the meta values its batches read and wrote (cursors, lane ends,
    counters: several store reads a receive or an ack, bench figure 3 (b)); each batch
    reads what the commits before it left, whatever wrote it: a put, a delete, a range
    delete, an op rolled back, a commit that failed."""
    reads: list[bytes] = []
    store_get = store.get

    def counted(cf: str, key: bytes) -> bytes | None:
        if cf == CF.META:
            reads.append(key)
        return store_get(cf, key)

    monkeypatch.setattr(store, "get", counted)

    def read(key: bytes) -> bytes | None:
        return call(writer, lambda txn: txn.get(CF.META, key), durable=False)

    assert read(b"k") is None
    call(writer, put_op(CF.META, b"k", b"1"), durable=False)
    assert [read(b"k") for _ in range(3)] == [b"1"] * 3
    assert reads.count(b"k") == 1  # read from the store once, then kept

    def put_then_fail(txn: Txn) -> None:
        txn.put(CF.META, b"k", b"rolled back")
        raise RocktimerError("refused")

    with pytest.raises(RocktimerError):
        call(writer, put_then_fail, durable=False)
    assert read(b"k") == b"1"
    store.fail_writes = 1
    with pytest.raises(StorageError):
        call(writer, put_op(CF.META, b"k", b"not written"), durable=False)
    assert read(b"k") == b"1" == store_get(CF.META, b"k")

    call(writer, lambda txn: txn.delete(CF.META, b"k"), durable=False)
    assert read(b"k") is None
    call(writer, put_op(CF.META, b"r1", b"x"), durable=False)
    assert read(b"r1") == b"x"
    call(writer, lambda txn: txn.delete_range(CF.META, b"r0", b"r9"), durable=False)
    assert store_get(CF.META, b"r1") is None
    assert read(b"r1") is None


def test_stop_finishes_queued_ops_then_refuses_new_ones(writer: Writer) -> None:
    gate = Gate()
    held: concurrent.futures.Future[None] = concurrent.futures.Future()
    writer.enqueue_internal(gate.op, durable=False, future=held)
    gate.wait_entered()
    queued: list[concurrent.futures.Future[bytes | None]] = []
    for i in range(3):
        fut: concurrent.futures.Future[bytes | None] = concurrent.futures.Future()
        writer.enqueue_internal(put_op(CF.META, bytes([i]), b"v"), durable=False, future=fut)
        queued.append(fut)
    stopper = threading.Thread(target=writer.stop)
    stopper.start()
    gate.release.set()
    stopper.join(10)
    assert not stopper.is_alive()
    assert [f.result(timeout=0) for f in queued] == [None, None, None]
    assert not writer.running
    with pytest.raises(WriterStopped):
        writer.call(put_op(CF.META, b"late", b"v"), durable=False)

    async def submit_late() -> None:
        writer.submit(put_op(CF.META, b"late", b"v"), durable=False)

    with pytest.raises(WriterStopped):
        run(submit_late())


def test_scan_horizon_stays_at_the_now_of_the_batch_in_progress(
    writer: Writer, clock: FakeClock
) -> None:
    start = clock.now_ms()
    assert writer.scan_horizon() == start
    gate = Gate()
    held: concurrent.futures.Future[None] = concurrent.futures.Future()
    writer.enqueue_internal(gate.op, durable=False, future=held)
    gate.wait_entered()
    clock.advance(50)
    # A timer created by this batch may be due at start + 1 < now: not scannable yet.
    assert writer.scan_horizon() == start
    gate.release.set()
    held.result(timeout=10)
    assert writer.scan_horizon() == start + 50


def test_a_send_already_due_never_becomes_a_timer_key(
    writer: Writer, store: RecordingStore, clock: FakeClock
) -> None:
    now = clock.now_ms()
    due_now = call(writer, lambda t: messages.send(t, record("t", "now", now)), durable=True)
    past = call(writer, lambda t: messages.send(t, record("t", "past", now - 10**6)), durable=True)
    future = call(writer, lambda t: messages.send(t, record("t", "next", now + 1)), durable=True)
    assert due_now.state is MessageState.DELIVERED
    assert past.state is MessageState.DELIVERED
    assert future.state is MessageState.SCHEDULED
    assert timer_keys(store) == [message.timer_key(now + 1, "t", "next")]
    assert [r.msg_id for r in topic_log(store, "t")] == ["now", "past"]
    assert writer.pending_timers == 1
