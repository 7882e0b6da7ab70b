"""A standby that falls behind its owner, on real NATS JetStream servers.

Its reads are flow-controlled: a burst it cannot apply as fast as it comes waits in the
stream, not in a client buffer that drops records, so it catches up by reading on, not by
restoring a snapshot. A record missing before another one in what it was handed is never
applied over: it reads again from the seq its copy holds. And a take-over whose copy cannot
catch up in time gives up within its bound, saying how far the copy got, and lets go of
the lease.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.cluster.replica import Bus, Replica
from app.cluster.replica.standby import Item, Standby
from storage.store import RocksStore
from tests.cluster.replica_support import K, Loop, dump, engine_config, has, record, take_over
from tests.support.nats import NatsCluster, owners, readers
from tests.workers.support import stop_within
from workers.engine import Engine

LEASE_MS = 3000  # renewed in time on a loaded machine: a lapse would refuse the burst's sends
BURST = 5000  # records appended while the standby's apply is held: more than nats-py buffers
CATCH_UP_S = 120.0  # a loaded machine applies a burst of BURST records well within this
HOLD_LIMIT_S = 300.0  # a held apply goes on by itself after this (a test that failed early)
OFFERED_S = 15.0  # how long the burst is left on offer to the held standby (see offered)


@pytest.fixture
def lease_ms() -> int:
    return LEASE_MS


@pytest.fixture
def replicas(bus: Bus, tmp_path: Path) -> Iterator[dict[str, Replica]]:
    made = {
        name: Replica(
            bus,
            K,
            str(tmp_path / name / f"p{K}"),
            node_id=name,
            advertise="127.0.0.1:1",
            on_deposed=lambda k: None,
            snapshot_every=10**9,  # no snapshot: a restore could only be a wiped copy
        )
        for name in ("a", "b")
    }
    yield made
    for replica in made.values():
        replica.close()


class Held:
    """A standby's apply that waits while the gate is shut (a slow disk, a busy core)."""

    def __init__(self, apply: Callable[..., None]) -> None:
        self.apply = apply
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def __call__(self, *args: Any) -> None:
        self.waiting.set()
        self.gate.wait(HOLD_LIMIT_S)
        self.apply(*args)


def hold(monkeypatch: pytest.MonkeyPatch, standby: Standby) -> Held:
    held = Held(standby._apply)
    monkeypatch.setattr(standby, "_apply", held)
    return held


def own(replica: Replica) -> Engine:
    engine = Engine(engine_config(replica.path), changelog=take_over(replica, 30.0))
    engine.start()
    return engine


def burst(engine: Engine, loop: Loop, n: int, prefix: str) -> None:
    """``n`` sends one after the other: one changelog record each."""
    for i in range(n):
        loop.run(engine.send(record(f"{prefix}{i}")))


def offered(nats_cluster: NatsCluster, last: int) -> None:
    """Keep the standby held until the servers delivered it everything up to ``last`` or
    OFFERED_S passed. A push subscription is handed a window, then more each time the
    servers see it stalled (every few seconds): far more than nats-py buffers, which drops
    the rest. A pull consumer is handed only what it fetched: it gets nothing meanwhile."""
    deadline = time.monotonic() + OFFERED_S
    while time.monotonic() < deadline:
        if (
            max(
                (r.delivered_seq for r in readers(nats_cluster.urls) if r.partition == K), default=0
            )
            >= last
        ):
            return
        time.sleep(0.5)


def owner_dump(engine: Engine, path: str) -> list[tuple[str, bytes, bytes]]:
    stop_within(engine)
    copy = RocksStore(path)
    try:
        return list(dump(copy))
    finally:
        copy.close()


def test_replica_a_standby_held_through_a_burst_catches_up_without_a_restore(
    replicas: dict[str, Replica],
    loop: Loop,
    monkeypatch: pytest.MonkeyPatch,
    nats_cluster: NatsCluster,
) -> None:
    a, b = replicas["a"], replicas["b"]
    b.follow()
    engine: Engine | None = own(a)
    assert engine is not None
    try:
        loop.run(engine.send(record("first")))
        changelog = a.changelog
        assert changelog is not None
        standby = b.standby
        assert standby is not None
        assert standby.wait_applied(changelog.last, 20.0)
        held = hold(monkeypatch, standby)
        before = changelog.records
        burst(engine, loop, 1, "w")  # the standby takes it and waits in its apply
        assert held.waiting.wait(20.0)
        burst(engine, loop, BURST, "m")
        assert changelog.records - before > BURST
        offered(nats_cluster, changelog.last)
        held.gate.set()
        assert standby.wait_applied(changelog.last, CATCH_UP_S)
        last = changelog.last
        owner = owner_dump(engine, a.path)
        engine = None
        assert standby.applied == last
        assert standby.restores == 0  # read on from where it was: nothing was dropped
        assert list(dump(standby.store)) == owner
    finally:
        if engine is not None:
            stop_within(engine)


def test_replica_a_record_missing_in_delivery_is_read_again_never_applied_over(
    replicas: dict[str, Replica], loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever loses a record between the stream and the apply (a dropped delivery), the
    next record names the one before it: the copy stops short of the gap, reads again from
    its own seq, and ends identical to the owner without a restore."""
    a, b = replicas["a"], replicas["b"]
    b.follow()
    standby = b.standby
    assert standby is not None
    fetch = standby._fetch
    dropped: list[int] = []
    seen_after_drop: list[int] = []

    async def lossy(*args: Any) -> list[Item]:
        batch = await fetch(*args)
        if not dropped and len(batch) >= 3:
            dropped.append(batch[1][0])
            seen_after_drop.append(standby.applied)
            return [batch[0], *batch[2:]]
        return batch

    monkeypatch.setattr(standby, "_fetch", lossy)
    engine: Engine | None = own(a)
    assert engine is not None
    try:
        held = hold(monkeypatch, standby)
        burst(engine, loop, 1, "w")
        assert held.waiting.wait(20.0)
        burst(engine, loop, 50, "m")  # waiting in the stream: the next fetch takes many
        held.gate.set()
        changelog = a.changelog
        assert changelog is not None
        assert standby.wait_applied(changelog.last, CATCH_UP_S)
        assert dropped, "no fetch of 3 records or more: nothing was dropped"
        owner = owner_dump(engine, a.path)
        engine = None
        assert standby.restores == 0
        assert list(dump(standby.store)) == owner
    finally:
        if engine is not None:
            stop_within(engine)


def test_replica_a_take_over_that_cannot_catch_up_gives_up_in_time_and_lets_go(
    replicas: dict[str, Replica],
    loop: Loop,
    monkeypatch: pytest.MonkeyPatch,
    nats_cluster: NatsCluster,
) -> None:
    a, b = replicas["a"], replicas["b"]
    b.follow()
    standby = b.standby
    assert standby is not None
    engine: Engine | None = own(a)
    assert engine is not None
    held = hold(monkeypatch, standby)
    burst(engine, loop, 1, "w")
    assert held.waiting.wait(20.0)
    burst(engine, loop, 20, "m")
    changelog = a.changelog
    assert changelog is not None
    last = changelog.last
    stop_within(engine)
    engine = None
    a.release()  # a clean stop: the lease is given up at once
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=rf"holds up to seq \d+ of {last}\b"):
        b.take_over(2.0)
    assert time.monotonic() - started < 2.0 + 5.0  # its bound, and the lease's release
    assert K not in owners(nats_cluster.urls, K + 1)  # let go: another node need not wait the TTL
    held.gate.set()
    engine = Engine(engine_config(b.path), changelog=take_over(b, 30.0))
    engine.start()
    try:
        assert has(engine, "m19")
    finally:
        stop_within(engine)
