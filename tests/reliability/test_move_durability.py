"""A move of due timers commits without an fsync of its own, and needs none: on a real
RocksDB on the power-cut file system (tools/powercut), the ack that follows a delivery
makes the move durable with its own fsync (the WAL is one ordered log: syncing it syncs
every write before), and a move that no synced write followed is lost whole to a power cut,
leaving its timer key to be moved again after the restart (at-least-once, never lost).
docs/architecture.md, invariant 6."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

from storage.errors import StorageError
from storage.store import RocksStore
from tests.workers.support import (
    WAIT_S,
    record,
    run,
    start_parts,
    stop_within,
    timer_keys,
    topic_log,
    wait_until,
)
from tools.powercut.mount import PowerCut
from workers.clock import FakeClock
from workers.engine import Engine, EngineConfig
from workers.ops import consume

DUE_IN_MS = 100


def _engine(data: Path, clock: FakeClock) -> Engine:
    """The writer, the scanner and the deliverer (the scanner moves small spans itself
    while the deliverer is idle): no sweeper, no exporter, nothing else that could fsync
    the WAL behind the test's back."""
    engine = Engine(EngineConfig(data_dir=str(data), events=False), clock)
    start_parts(engine, deliverer=True)
    return engine


def _cut(fs: PowerCut, engine: Engine) -> None:
    """The power goes: nothing more reaches the disk, the unsynced is dropped."""
    fs.freeze()

    def stop() -> None:  # its writes fail from the freeze on (EIO), its close too
        with contextlib.suppress(StorageError):
            engine.stop()

    stopper = threading.Thread(target=stop, name="test-engine-stop", daemon=True)
    stopper.start()
    stopper.join(WAIT_S)
    assert not stopper.is_alive(), "Engine.stop() did not return"
    fs.cut(torn=False, seed=0)
    fs.mount()


async def _delivered(engine: Engine, clock: FakeClock) -> list[consume.Received]:
    """Park a long poll on topic t, let its timer fall due: the scanner's move serves it."""
    waiting = asyncio.ensure_future(engine.receive("t", "g", 10, 60_000, 30_000))
    await asyncio.get_running_loop().run_in_executor(
        None, lambda: wait_until(lambda: engine.long_polls.waiting == 1, what="the park")
    )
    clock.advance(DUE_IN_MS)
    return await waiting


def test_the_ack_after_a_delivery_makes_its_unsynced_move_durable(fs: PowerCut) -> None:
    clock, data = FakeClock(), fs.mount_point / "data"
    engine = _engine(data, clock)
    run(engine.send(record("t", "m", clock.now_ms() + DUE_IN_MS)))
    syncs = engine.writer._syncer.syncs

    async def deliver_and_ack() -> list[str]:
        got = await _delivered(engine, clock)
        assert [one.record.msg_id for one in got] == ["m"]
        # The move and the receive it served committed, and no fsync ran for them.
        assert engine.writer._syncer.syncs == syncs
        return await engine.ack("t", "g", [got[0].receipt])

    assert run(deliver_and_ack()) == ["acked"]
    _cut(fs, engine)

    engine = _engine(data, clock)
    try:
        assert timer_keys(engine.store) == []
        assert [r.msg_id for r in topic_log(engine.store, "t")] == ["m"]
        assert engine.group_view("t", "g", "m").state == "acked"
    finally:
        stop_within(engine)


def test_a_move_lost_to_a_power_cut_leaves_its_timer_to_be_moved_again(fs: PowerCut) -> None:
    clock, data = FakeClock(), fs.mount_point / "data"
    engine = _engine(data, clock)
    run(engine.send(record("t", "m", clock.now_ms() + DUE_IN_MS)))
    assert [one.record.msg_id for one in run(_delivered(engine, clock))] == ["m"]
    _cut(fs, engine)  # no synced write since the move

    store = RocksStore(data)
    try:  # the move is gone whole: the timer is back, the log and the hold are not
        assert len(timer_keys(store)) == 1
        assert topic_log(store, "t") == []
    finally:
        store.close()
    engine = _engine(data, clock)
    try:
        got = run(engine.receive("t", "g", 10, 60_000, 30_000))  # due: moved at start
        assert [(one.record.msg_id, one.attempt) for one in got] == [("m", 1)]
    finally:
        stop_within(engine)
