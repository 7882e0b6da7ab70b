"""Pending timers live on disk, not in memory; a storm of due timers is bounded by the scan
chunk and the put queue (back-pressure), and still delivered exactly once."""

from __future__ import annotations

import queue
from typing import Any

from storage.records import MessageRecord
from tests.workers.conftest import EngineFactory
from tests.workers.support import record, run, timer_keys, topic_log, wait_until
from workers.clock import FakeClock
from workers.engine import Engine
from workers.ops.messages import SendOutcome
from workers.scanner import Chunk

DAY_MS = 86_400_000
OPS_IN_FLIGHT = 20  # send_batch ops awaited together: several per group commit


def send_many(engine: Engine, recs: list[MessageRecord]) -> None:
    async def scenario() -> None:
        batches = [recs[i : i + 1_000] for i in range(0, len(recs), 1_000)]
        for i in range(0, len(batches), OPS_IN_FLIGHT):
            futures = [engine.send_batch(b) for b in batches[i : i + OPS_IN_FLIGHT]]
            for outcomes in [await f for f in futures]:
                assert all(isinstance(o, SendOutcome) and o.created for o in outcomes)

    run(scenario())


class RecordingQueue(queue.Queue[Chunk]):
    """The put queue, remembering the most chunks and keys it ever held at once."""

    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize)
        self.max_chunks = 0
        self.max_keys = 0
        self._keys = 0

    def _put(self, item: Chunk) -> None:
        super()._put(item)
        self._keys += len(item)
        self.max_chunks = max(self.max_chunks, self._qsize())
        self.max_keys = max(self.max_keys, self._keys)

    def _get(self) -> Chunk:
        item = super()._get()
        self._keys -= len(item)
        return item


def use_queue(engine: Engine, put_queue: RecordingQueue) -> None:
    q: Any = put_queue
    engine.put_queue = engine.scanner.put_queue = engine.deliverer.put_queue = q


def test_200k_future_timers_are_not_held_in_memory(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    chunk = 500
    engine = make_engine(scan_chunk=chunk)
    engine.start()
    start = clock.now_ms()
    n = 200_000
    earliest = start + DAY_MS
    send_many(engine, [record(f"t{i % 4}", f"m{i}", earliest + i) for i in range(n)])
    assert engine.writer.pending_timers == n

    wait_until(lambda: engine.scanner.next_due_ms == earliest, what="the scanner's next due")
    assert engine.scanner.held_max == 0  # nothing due: the scanner never held a key
    assert engine.put_queue.qsize() == 0
    assert engine.deliverer.moved == 0

    # Let the first 1 500 fall due: only they are scanned, a chunk at a time.
    clock.set(earliest + 1_499)
    wait_until(lambda: engine.deliverer.moved == 1_500, what="the first 1500")
    wait_until(lambda: engine.scanner.next_due_ms == earliest + 1_500, what="the next due")
    assert 0 < engine.scanner.held_max <= chunk
    assert engine.put_queue.qsize() == 0
    assert engine.writer.pending_timers == n - 1_500


def test_a_storm_due_at_once_is_bounded_and_delivered_exactly_once(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    chunk, chunks = 500, 2
    engine = make_engine(scan_chunk=chunk, put_queue_chunks=chunks)
    # The engine's own bound, not one of the test's: the setting must reach the queue.
    put_queue = RecordingQueue(maxsize=engine.put_queue.maxsize)
    use_queue(engine, put_queue)
    engine.start()
    n = 20_000
    due = clock.now_ms() + 1_000
    send_many(engine, [record(f"t{i % 2}", f"m{i}", due) for i in range(n)])
    clock.advance(1_000)

    wait_until(lambda: engine.deliverer.moved == n, timeout=30, what="the storm")
    assert engine.writer.pending_timers == 0
    assert timer_keys(engine.store) == []
    assert engine.scanner.held_max <= chunk
    assert put_queue.maxsize == chunks
    assert put_queue.max_keys <= chunk * chunks  # no scanned chunk is over scan_chunk
    assert engine.deliverer.batches < n // chunk  # moves were batched, not one per timer
    for t in range(2):
        ids = [e.msg_id for e in topic_log(engine.store, f"t{t}")]
        assert sorted(ids) == sorted(f"m{i}" for i in range(t, n, 2))
