"""The scanner moves a small span of due timers itself while the deliverer is idle (one
thread scans, moves and serves the long polls waiting on the topic, in one turn); full
chunks (a storm) still go through the put queue; and no span overtakes one handed over."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storage import keys
from storage.errors import StorageError
from storage.store import CF
from storage.txn import Txn
from tests.workers.conftest import EngineFactory
from tests.workers.support import (
    call,
    record,
    run,
    start_parts,
    timer_keys,
    topic_log,
    wait_until,
)
from workers.clock import FakeClock
from workers.engine import Engine
from workers.ops import consume, messages
from workers.writer import Writer


@dataclass(frozen=True, slots=True)
class Commit:
    thread: str  # the thread that made it
    woken: frozenset[str]  # the topics it gave something to read
    held: bool  # it held messages of topic t for group g (a receive)


def commits_of(engine: Engine) -> list[Commit]:
    """Each commit from now on."""
    seen: list[Commit] = []
    hook: Callable[[Txn], None] | None = engine.writer._on_commit
    held_key = keys.group_counts_key("t", "g")

    def recording(txn: Txn) -> None:
        held = txn.counts.get(held_key, (0, 0, 0))[0] > 0
        seen.append(Commit(threading.current_thread().name, frozenset(txn.woken_topics), held))
        if hook is not None:
            hook(txn)

    engine.writer._on_commit = recording
    return seen


def test_a_few_due_timers_are_moved_and_handed_to_a_long_poll_in_one_commit_on_the_scanner(
    engine: Engine, clock: FakeClock
) -> None:
    due = clock.now_ms() + 100
    for msg_id in ("a", "b", "c"):
        run(engine.send(record("t", msg_id, due)))
    commits = commits_of(engine)

    async def poll() -> list[str]:
        waiting = asyncio.ensure_future(engine.receive("t", "g", 10, 60_000, 30_000))
        wait_until_parked = asyncio.get_running_loop().run_in_executor(
            None, lambda: wait_until(lambda: engine.long_polls.waiting == 1, what="the park")
        )
        await wait_until_parked
        clock.advance(100)
        return [got.record.msg_id for got in await waiting]

    assert run(poll()) == ["a", "b", "c"]
    # The receiver may have its reply before the scanner's call has returned and counted:
    # moved_here is counted last, once the move's call has returned.
    wait_until(lambda: engine.deliverer.moved_here == 1, what="the move counted on the scanner")
    assert engine.deliverer.moved == 3
    # The move and the parked receive it woke: one commit, on the scanner's thread (no
    # hand-off to the deliverer's thread, no second batch for the receive).
    moves = [c for c in commits if "t" in c.woken]
    assert moves == [Commit("rocktimer-scanner", frozenset({"t"}), held=True)]
    assert [c for c in commits if c.held] == moves
    assert engine.deliverer.batches == 1  # one move, not through the put queue


def test_a_receive_served_by_a_move_that_fails_answers_empty_and_looks_again(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    """The move's commit fails once (the disk): the parked receive it would have served is
    not failed with it; the move is retried and the receiver gets the message."""
    engine = make_engine()
    engine.start()
    due = clock.now_ms() + 100
    run(engine.send(record("t", "a", due)))
    failing = {"left": 1}
    write = engine.store.write_staged

    def flaky(*args: Any, **kwargs: Any) -> None:
        if failing["left"] and threading.current_thread().name == "rocktimer-scanner":
            failing["left"] -= 1
            raise StorageError("injected: the disk failed the move's write")
        write(*args, **kwargs)

    engine.store.write_staged = flaky  # type: ignore[method-assign]

    async def poll() -> list[str]:
        waiting = asyncio.ensure_future(engine.receive("t", "g", 10, 60_000, 30_000))
        wait_until_parked = asyncio.get_running_loop().run_in_executor(
            None, lambda: wait_until(lambda: engine.long_polls.waiting == 1, what="the park")
        )
        await wait_until_parked
        clock.advance(100)
        return [got.record.msg_id for got in await waiting]

    assert run(poll()) == ["a"]
    assert failing["left"] == 0  # the failure did happen
    assert engine.deliverer.failures == 1


def test_full_chunks_of_a_storm_still_go_through_the_put_queue(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = make_engine(scan_chunk=10)
    engine.start()
    due = clock.now_ms() + 100
    n = 45
    run(engine.send_batch([record("t", f"m{i:03}", due + i // 20) for i in range(n)]))
    clock.advance(200)
    wait_until(lambda: engine.deliverer.moved == n, what="the storm")
    assert engine.deliverer.batches > engine.deliverer.moved_here  # the full chunks: queued
    dues = [m.deliver_at_ms for m in topic_log(engine.store, "t")]
    assert dues == sorted(dues)
    assert timer_keys(engine.store) == []


def test_a_span_is_not_moved_ahead_of_one_the_deliverer_holds(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    """A full chunk is in the deliverer's hands (its move waits for the writer); a later
    span, small enough to be moved on the scanner's thread, is handed over behind it."""
    engine = make_engine(scan_chunk=2)
    start_parts(engine, scanner=True, deliverer=False)
    start = clock.now_ms()
    run(engine.send(record("t", "a", start + 100)))
    run(engine.send(record("t", "b", start + 100)))
    run(engine.send(record("t", "c", start + 200)))
    clock.advance(100)
    wait_until(lambda: engine.put_queue.qsize() == 1, what="the full chunk's hand-over")
    with engine.writer._batch_lock:  # every move waits for the writer meanwhile
        engine.deliverer.start()
        wait_until(lambda: engine.put_queue.qsize() == 0, what="the deliverer taking it")
        clock.advance(100)
        wait_until(lambda: engine.put_queue.qsize() == 1, what="the later span's hand-over")
        assert engine.deliverer.moved == 0
    wait_until(lambda: engine.deliverer.moved == 3, what="both moves")
    assert engine.deliverer.moved_here == 0
    assert [m.msg_id for m in topic_log(engine.store, "t")] == ["a", "b", "c"]


def test_a_receive_reads_what_its_own_batch_appended_after_what_is_stored(
    writer: Writer, clock: FakeClock
) -> None:
    """lanes.read: the stored entries after the cursor, then the batch's own appends in seq
    order (one deleted again in the batch skipped), and the cursor past what it returned."""
    now = clock.now_ms()
    call(writer, lambda txn: messages.send(txn, record("t", "stored", now)), durable=False)

    def send_then_receive(txn: Txn) -> list[str]:
        for msg_id in ("new1", "new2", "new3"):
            messages.send(txn, record("t", msg_id, now))
        txn.delete(CF.LOGS, keys.log_key(keys.topic_lane("t"), 2))  # new2, gone again
        return [got.record.msg_id for got in consume.receive(txn, "t", "g", 10, 30_000)]

    assert call(writer, send_then_receive, durable=False) == ["stored", "new1", "new3"]
    again = call(writer, lambda txn: consume.receive(txn, "t", "g", 10, 30_000), durable=False)
    assert again == []  # the cursor is past them all
