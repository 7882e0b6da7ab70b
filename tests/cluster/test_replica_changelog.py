"""A partition's changelog on real NATS JetStream servers: an owner's engine appends every
group commit, a standby applies them into an identical store, and an owner another node
fenced can append nothing more."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats.js.errors
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.cluster.replica import Bus, Replica
from app.cluster.replica.bus import subject
from app.metrics import RequestTimes, registry_for
from app.push.pusher import Pusher
from storage.errors import PartitionUnavailable, StorageError
from storage.keys import RECEIPT_SECRET_KEY
from storage.store import CF, Delete, RocksStore
from storage.txn import Txn
from tests.cluster.replica_support import (
    TOPIC,
    K,
    Loop,
    dump,
    engine_config,
    has,
    record,
    take_over,
)
from tests.support.nats import NatsCluster
from tests.support.nats import changelog as changelog_records
from tests.workers.support import stop_within, topic_log, wait_until
from workers.engine import Engine

# Short, as the tests wait for a lease to run out; long enough that a loaded machine renews
# it in time (every lease/4): at 1.5 s an owner's KV updates came too late under load, its
# lease lapsed between two of them and it refused to serve right after taking over.
LEASE_MS = 3000


@pytest.fixture
def lease_ms() -> int:
    return LEASE_MS


class Node:
    """A partition's replica on one (in-process) node, and the engine it opens as owner."""

    def __init__(self, bus: Bus, root: Path, name: str) -> None:
        self.deposed: list[int] = []
        self.path = str(root / name / f"p{K}")
        self.replica = Replica(
            bus,
            K,
            self.path,
            node_id=name,
            advertise="127.0.0.1:1",
            on_deposed=self.deposed.append,
        )
        self.engine: Engine | None = None

    def own(self) -> Engine:
        changelog = take_over(self.replica, 20.0)
        self.engine = Engine(engine_config(self.path), changelog=changelog)
        self.engine.start()
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            stop_within(self.engine)
        self.replica.close()


@pytest.fixture
def nodes(bus: Bus, tmp_path: Path) -> Iterator[list[Node]]:
    made = [Node(bus, tmp_path, name) for name in ("a", "b")]
    yield made
    for node in made:
        node.close()


def test_replica_standby_applies_an_identical_store(
    nodes: list[Node], loop: Loop, nats_cluster: NatsCluster
) -> None:
    a, b = nodes
    b.replica.follow()
    engine = a.own()
    for i in range(300):
        loop.run(engine.send(record(f"m{i}", body=os.urandom(i % 50))))
    batch = [record(f"b{i}") for i in range(500)]  # one request in several group commits
    loop.run(engine.send_batch(batch))
    for i in range(0, 300, 7):
        loop.run(engine.cancel(TOPIC, f"m{i}"))
    # One commit larger than a NATS message: appended as parts, joined by the standby.
    loop.run(engine.send(record("large", body=os.urandom(3 * 1024 * 1024))))
    changelog = a.replica.changelog
    assert changelog is not None
    assert b.replica.standby is not None
    assert b.replica.standby.wait_applied(changelog.last, 20.0)
    kinds = [r.data[:1] for r in changelog_records(nats_cluster.urls, K)]
    assert kinds.count(b"P") >= 2  # the large commit took several records
    assert kinds.count(b"L") == 1
    stop_within(engine)  # nothing more written: the stores can be compared
    a.engine = None
    copy = RocksStore(a.path)
    try:
        owner = list(dump(copy))
    finally:
        copy.close()
    standby = list(dump(b.replica.standby.store))
    assert len(owner) > 800
    assert standby == owner
    # The receipt secret came with the fence: both copies issue the same receipts.
    assert any(cf == CF.META and key == b"receipt-secret" for cf, key, _ in standby)


def test_replica_a_fenced_owner_is_refused_and_rebuilds(
    nodes: list[Node], loop: Loop, nats_cluster: NatsCluster
) -> None:
    a, b = nodes
    b.replica.follow()
    old = a.own()
    loop.run(old.send(record("before")))
    old_changelog = a.replica.changelog
    assert old_changelog is not None
    # The owner stops renewing (a paused process would): its lease runs out, b takes over.
    old_changelog.lease.stop_renewing()
    new = b.own()
    new_changelog = b.replica.changelog
    assert new_changelog is not None
    assert new_changelog.last > old_changelog.last
    assert b.replica.serving
    assert not a.replica.serving  # reads too: the router stops answering from a's copy
    # Past its lease deadline the old owner refuses every batch without asking NATS ...
    with pytest.raises(PartitionUnavailable, match="is not served right now"):
        loop.run(old.send(record("stale")))
    # ... and an append that got past the gate is refused by the stream: the fence.
    refused = old_changelog.append((), {CF.META: {b"stale": b"1"}})
    with pytest.raises(PartitionUnavailable):
        refused.result(10)
    assert old_changelog.deposed is not None
    wait_until(lambda: a.deposed == [K], what="on_deposed")
    writers = [r.node for r in changelog_records(nats_cluster.urls, K)]
    assert writers[writers.index("b") :].count("a") == 0  # nothing of a's after b's fence
    # The new owner has what the old one acknowledged, and goes on.
    loop.run(new.send(record("after")))
    assert has(new, "before")
    # The deposed node drops its copy and rebuilds it from the stream as a standby.
    stop_within(old)
    a.engine = None
    a.replica.demote()
    standby = a.replica.standby
    assert standby is not None
    assert standby.wait_applied(new_changelog.last, 20.0)
    assert standby.store.get(CF.META, b"stale") is None
    assert has(new, "after")


@pytest.mark.parametrize(
    "err_code",
    [
        10164,  # the leader cannot check yet: the record before is still in process there
        10071,  # a mismatch said in so many words: still checked against the subject
    ],
)
def test_replica_a_refusal_while_the_owners_record_is_still_last_is_tried_again(
    nodes: list[Node],
    loop: Loop,
    nats_cluster: NatsCluster,
    bus: Bus,
    monkeypatch: pytest.MonkeyPatch,
    err_code: int,
) -> None:
    """The stream's leader refuses an append as it does in the moment it cannot check the
    expected last seq; nobody appended after the owner's record, so this is no fence: the
    owner appends it again, goes on serving, and is not deposed."""
    a, _ = nodes
    engine = a.own()
    loop.run(engine.send(record("before")))
    changelog = a.replica.changelog
    assert changelog is not None
    publish = bus.js.publish
    refused: list[str] = []

    async def refusing_once(subj: str, payload: bytes = b"", **kwargs: Any) -> Any:
        if subj == subject(K) and not refused:
            refused.append(kwargs["headers"]["Nats-Expected-Last-Subject-Sequence"])
            raise nats.js.errors.BadRequestError(
                code=400, err_code=err_code, description="wrong last sequence"
            )
        return await publish(subj, payload, **kwargs)

    monkeypatch.setattr(bus.js, "publish", refusing_once)
    assert loop.run(engine.send(record("after"))).created
    assert len(refused) == 1
    assert int(refused[0]) < changelog.last  # appended after all
    assert changelog.deposed is None
    assert a.deposed == []
    assert a.replica.serving
    loop.run(engine.send(record("later")))
    assert {r.node for r in changelog_records(nats_cluster.urls, K)} == {"a"}
    assert has(engine, "after")


def test_replica_a_move_whose_lease_lapsed_during_its_batch_is_not_made_again(
    nodes: list[Node], loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner's lease lapses while a move's batch is being written (a loaded machine
    renewing late): the move committed and its record went to the changelog, so the
    deliverer must take it as made. Reported failed, it was moved again once the lease was
    renewed: the message delivered twice and the pending count taken down twice."""
    a, _ = nodes
    engine = a.own()
    changelog = a.replica.changelog
    assert changelog is not None
    append = changelog.append
    lapsed: list[int] = []

    def lapse_after_the_move(ranges: Any, staged: Any) -> Any:
        future = append(ranges, staged)
        if staged.get(CF.LOGS) and not lapsed:  # the move's batch, committed: lapse now
            lapsed.append(changelog.records)
            changelog.lease.deadline = time.monotonic() - 1
        return future

    monkeypatch.setattr(changelog, "append", lapse_after_the_move)
    loop.run(engine.send(record("due", deliver_at_ms=engine.clock.now_ms() + 200)))
    assert engine.writer.pending_timers == 1
    wait_until(lambda: engine.deliverer.batches + engine.deliverer.moved_here >= 1, what="a move")
    assert lapsed, "the move's batch was appended"
    assert len(topic_log(engine.store, TOPIC)) == 1
    assert engine.writer.pending_timers == 0
    wait_until(lambda: changelog.lease.valid, what="the lease renewed")
    assert len(topic_log(engine.store, TOPIC)) == 1


def test_replica_a_send_is_answered_once_its_record_is_acknowledged(
    nodes: list[Node], loop: Loop, nats_cluster: NatsCluster
) -> None:
    a, _ = nodes
    engine = a.own()
    loop.run(engine.send(record("first")))
    for server in nats_cluster.servers:  # JetStream cannot ack while every server is stopped
        server.pause()
    try:
        held = asyncio.run_coroutine_threadsafe(engine.send(record("held")), loop.loop)
        # Written and fsynced here, visible to readers; not answered: its record has no ack.
        wait_until(lambda: has(engine, "held"), what="the write")
        wait_until(lambda: sum(engine.writer.fsync_seconds.snapshot()[0]) >= 2, what="its fsync")
        assert not held.done()
    finally:
        for server in nats_cluster.servers:
            server.resume()
    assert held.result(30).created
    changelog = a.replica.changelog
    assert changelog is not None
    assert changelog.deposed is None  # nobody else took it: the same owner goes on


def test_replica_a_quick_reply_is_not_given_once_the_lease_ran_out_during_its_batch(
    nodes: list[Node], loop: Loop
) -> None:
    a, _ = nodes
    engine = a.own()
    changelog = a.replica.changelog
    assert changelog is not None
    lease = changelog.lease

    def receive_while_paused(txn: Txn) -> str:
        """A batch that outlives the lease, as one running when the process was stopped."""
        lease.stop_renewing()
        wait_until(lambda: not lease.valid, what="the lease deadline")
        txn.put(CF.META, b"late", b"1")
        return "answered from a superseded copy"

    async def submit() -> str:
        return await engine.writer.submit(receive_while_paused, durable=False)

    with pytest.raises(PartitionUnavailable, match="is not served right now"):
        loop.run(submit())


def test_replica_a_node_with_a_longer_lease_keeps_the_buckets(
    bus: Bus, nats_cluster: NatsCluster
) -> None:
    """The owners' bucket expires leases after the TTL it was made with: a node set to a
    longer lease would otherwise serve past the moment another node may take over."""
    other = Bus.start(nats_cluster.urls.split(","), replicas=3, lease_ms=4 * LEASE_MS)
    try:
        assert other.lease_ms == LEASE_MS
    finally:
        other.close()


def test_replica_an_engine_never_makes_a_receipt_secret_of_its_own(nodes: list[Node]) -> None:
    """The secret comes with the partition's first fence, the same on every copy."""
    a, _ = nodes
    changelog = take_over(a.replica, 20.0)
    copy = RocksStore(a.path)
    try:
        assert copy.get(CF.META, RECEIPT_SECRET_KEY) is not None
        copy.write([Delete(CF.META, RECEIPT_SECRET_KEY)], sync=True)
    finally:
        copy.close()
    with pytest.raises(StorageError, match="no receipt secret"):
        Engine(engine_config(a.path), changelog=changelog)


def test_replica_an_owner_serves_again_after_nats_was_gone_longer_than_its_lease(
    nodes: list[Node], loop: Loop, nats_cluster: NatsCluster
) -> None:
    """Its lease lapses while no server answers (it refuses meanwhile); nobody else took
    the partition, so once NATS is back it takes the lease again and goes on."""
    a, _ = nodes
    engine = a.own()
    loop.run(engine.send(record("before")))
    changelog = a.replica.changelog
    assert changelog is not None
    for server in nats_cluster.servers:
        server.pause()
    try:
        wait_until(lambda: not changelog.lease.valid, what="the lease to lapse")
        assert not a.replica.serving
        time.sleep(2 * LEASE_MS / 1000)  # the key expires on the servers meanwhile
    finally:
        for server in nats_cluster.servers:
            server.resume()
    wait_until(lambda: a.replica.serving, 30.0, "the lease taken again")
    loop.run(engine.send(record("after")))
    assert changelog.deposed is None
    assert has(engine, "after")


def test_replica_metrics_show_the_changelog(nodes: list[Node], loop: Loop) -> None:
    a, _ = nodes
    engine = a.own()
    loop.run(engine.send(record("m")))
    registry = registry_for(engine, RequestTimes(), Pusher(engine, frozenset()))  # as /metrics
    samples = {
        s.name: s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    assert samples["rocktimer_changelog_records_total"] >= 1
    assert samples["rocktimer_changelog_append_seconds_count"] >= 1
