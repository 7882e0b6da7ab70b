"""Helpers shared by the worker tests: bounded waits, records, partial engine start-up."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, ClassVar, TypeVar

from storage import keys
from storage.errors import StorageError
from storage.records import MessageRecord, decode_message
from storage.store import CF, Delete, DeleteRange, Put, RocksStore, WriteOp
from storage.txn import Txn
from workers.engine import Engine
from workers.writer import Writer

T = TypeVar("T")

WAIT_S = 10.0  # the longest any test waits for a background thread
POLL_S = 0.002
TIMER_END = b"\xff" * 9  # past every timer key


def wait_until(pred: Callable[[], bool], timeout: float = WAIT_S, what: str = "") -> None:
    """Poll ``pred`` until it holds; fail the test after ``timeout`` seconds of real time."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or pred}")
        time.sleep(POLL_S)


def run(coro: Coroutine[Any, Any, T], timeout: float = 3 * WAIT_S) -> T:
    """Run a coroutine on a fresh event loop; fail instead of hanging if the writer never
    answers."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def call(writer: Writer, fn: Callable[[Txn], T], *, durable: bool) -> T:
    """Writer.call with a deadline: a dead writer thread fails the test instead of hanging it."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    writer.enqueue_internal(fn, durable=durable, future=future)
    return future.result(timeout=WAIT_S)


def record(topic: str, msg_id: str, deliver_at_ms: int, body: bytes = b"body") -> MessageRecord:
    return MessageRecord(
        topic=topic, msg_id=msg_id, deliver_at_ms=deliver_at_ms, created_at_ms=0, body=body
    )


def timer_keys(store: RocksStore) -> list[bytes]:
    return [k for k, _ in store.scan(CF.TIMERS, b"", TIMER_END, 10**9)]


def topic_log(store: RocksStore, topic: str) -> list[MessageRecord]:
    """The topic's log, in seq order."""
    lane = keys.topic_lane(topic)
    entries = store.scan(CF.LOGS, lane, keys.prefix_end(lane), 10**9)
    return [decode_message(v) for _, v in entries]


def stop_within(engine: Engine, timeout: float = WAIT_S) -> None:
    """Engine.stop, failing the test instead of hanging it (a worker blocked on a dead
    writer would never return)."""
    stopper = threading.Thread(target=engine.stop, name="test-engine-stop", daemon=True)
    stopper.start()
    stopper.join(timeout)
    assert not stopper.is_alive(), "Engine.stop() did not return"


def start_parts(engine: Engine, *, scanner: bool = True, deliverer: bool = False) -> None:
    """Start the writer and some workers only; ``engine.stop()`` still stops them all."""
    engine.writer.start()
    if scanner:
        engine.scanner.start()
    if deliverer:
        engine.deliverer.start()
    engine.started = True


class Gate:
    """An op that holds the writer thread until released, so that the ops queued meanwhile
    are all taken into the next group commit."""

    opened: ClassVar[list[Gate]] = []

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        Gate.opened.append(self)

    @classmethod
    def release_all(cls) -> None:
        """Let every held writer go (fixture teardown, before stopping the writer)."""
        for gate in cls.opened:
            gate.release.set()
        cls.opened.clear()

    def op(self, txn: Txn) -> None:
        self.entered.set()
        if not self.release.wait(WAIT_S):
            raise TimeoutError("gate never released")

    def wait_entered(self) -> None:
        assert self.entered.wait(WAIT_S), "the writer never took the gate op"


class RecordingStore(RocksStore):
    """A real RocksStore that remembers every write (as ops, with its sync flag) and can
    fail the next few writes, as a failing disk would."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.writes: list[tuple[list[WriteOp], bool]] = []
        self.synced_writes = 0  # writes[:synced_writes] are on disk (a WAL sync covered them)
        self.fail_writes = 0
        self.fail_syncs = 0
        self.hold_syncs: threading.Event | None = None  # set: WAL syncs wait until it is set
        self.sync_held = threading.Event()  # a WAL sync is waiting on hold_syncs
        self.failure: Exception = StorageError("injected write failure")

    def write(self, ops: Iterable[WriteOp], *, sync: bool) -> None:
        self._maybe_fail()
        op_list = list(ops)
        super().write(op_list, sync=sync)
        self.writes.append((op_list, sync))

    def write_staged(
        self,
        ranges: Sequence[DeleteRange],
        staged: dict[str, dict[bytes, bytes | None]],
        *,
        sync: bool,
    ) -> None:
        self._maybe_fail()
        super().write_staged(ranges, staged, sync=sync)
        ops: list[WriteOp] = list(ranges)
        for cf, values in staged.items():
            ops.extend(Delete(cf, k) if v is None else Put(cf, k, v) for k, v in values.items())
        self.writes.append((ops, sync))

    def sync_wal(self) -> None:
        covered = len(self.writes)
        if self.hold_syncs is not None:
            self.sync_held.set()
            self.hold_syncs.wait(WAIT_S)
        if self.fail_syncs > 0:
            self.fail_syncs -= 1
            self.failed = True  # as RocksStore.sync_wal leaves it after a real failure
            raise StorageError("injected WAL sync failure")
        super().sync_wal()
        self.synced_writes = covered

    def durable(self, index: int) -> bool:
        """Whether write ``index`` is on disk: written synced, or covered by a WAL sync."""
        return self.writes[index][1] or index < self.synced_writes

    def _maybe_fail(self) -> None:
        if self.fail_writes > 0:
            self.fail_writes -= 1
            raise self.failure
