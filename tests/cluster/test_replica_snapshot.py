"""Bounded rebuild: a standby stores snapshots of its copy and purges the changelog below
them; a node that joins starts from the snapshot, and a copy that missed purged records
(it was away) restores the snapshot instead of going on without them."""

from __future__ import annotations

import os
from pathlib import Path

from app.cluster.replica import Bus, Replica
from tests.cluster.replica_support import K, Loop, dump, engine_config, record, take_over
from tests.support.nats import NatsCluster, changelog
from tests.workers.support import stop_within, wait_until
from workers.engine import Engine

EVERY = 40  # records between two snapshots (SNAPSHOT_RECORDS in production)


def test_replica_rebuilds_from_a_snapshot_and_the_records_after_it(
    bus: Bus, nats_cluster: NatsCluster, tmp_path: Path, loop: Loop
) -> None:
    replicas = {
        name: Replica(
            bus,
            K,
            str(tmp_path / name / f"p{K}"),
            node_id=name,
            advertise="127.0.0.1:1",
            on_deposed=lambda k: None,
            snapshot_every=EVERY,
        )
        for name in ("a", "b", "c")
    }
    a, b, c = replicas["a"], replicas["b"], replicas["c"]
    engine: Engine | None = None
    try:
        b.follow()
        c.follow()
        engine = Engine(engine_config(a.path), changelog=take_over(a, 20.0))
        engine.start()
        loop.run(engine.send(record("early")))
        assert c.standby is not None
        assert c.standby.wait_applied(1, 10.0)
        c.close()  # c goes away: the records it would read next get purged meanwhile
        for i in range(6 * EVERY):  # one at a time: about a record each
            loop.run(engine.send(record(f"m{i}")))
        owner = a.changelog
        assert owner is not None
        assert b.standby is not None
        assert b.standby.wait_applied(owner.last, 20.0)
        wait_until(lambda: b.standby is not None and b.standby.snapshots >= 2, what="snapshots")
        kept = changelog(nats_cluster.urls, K)
        assert kept[0].seq > 1  # purged below the last snapshot
        assert len(kept) < owner.records
        # A node that joins: the snapshot, then the records after it.
        d = Replica(
            bus,
            K,
            str(tmp_path / "d" / f"p{K}"),
            node_id="d",
            advertise="127.0.0.1:1",
            on_deposed=lambda k: None,
            snapshot_every=10**9,
        )
        replicas["d"] = d
        d.follow()
        assert d.standby is not None
        assert d.standby.applied >= kept[0].seq  # it started from the snapshot
        # c comes back with its old copy: the records after it are gone: it restores.
        c.follow()
        for joined in (c, d):
            assert joined.standby is not None
            assert joined.standby.wait_applied(owner.last, 20.0)
        assert c.standby is not None
        assert c.standby.restores == 1
        stop_within(engine)
        engine = None
        assert b.standby.wait_applied(owner.last, 5.0)
        reference = list(dump(b.standby.store))
        assert d.standby is not None
        assert list(dump(d.standby.store)) == reference
        assert list(dump(c.standby.store)) == reference
    finally:
        if engine is not None:
            stop_within(engine)
        for replica in replicas.values():
            replica.close()


def test_replica_a_snapshot_is_due_after_as_many_bytes_as_the_last_one(
    bus: Bus, tmp_path: Path, loop: Loop
) -> None:
    """Few records of large commits also make a snapshot due: the bytes to replay after one
    stay about the snapshot's own size."""
    owner, standby = (
        Replica(
            bus,
            K,
            str(tmp_path / name / f"p{K}"),
            node_id=name,
            advertise="127.0.0.1:1",
            on_deposed=lambda k: None,
            snapshot_every=10**9,  # never by count
            snapshot_min_bytes=200_000,
        )
        for name in ("a", "b")
    )
    engine: Engine | None = None
    try:
        standby.follow()
        engine = Engine(engine_config(owner.path), changelog=take_over(owner, 20.0))
        engine.start()
        for i in range(8):  # 8 records of ~100 kB
            loop.run(engine.send(record(f"big{i}", body=os.urandom(100_000))))
        assert standby.standby is not None
        wait_until(lambda: standby.standby is not None and standby.standby.snapshots >= 1)
        assert standby.standby.snapshot_bytes > 0
    finally:
        if engine is not None:
            stop_within(engine)
        owner.close()
        standby.close()
