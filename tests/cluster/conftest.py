"""Cluster mode, black-box: real ``nats-server`` processes (the pinned PyPI wheel) routed into
one JetStream cluster on loopback, and real rocktimer nodes (``python -m app`` with
ROCKTIMER_CLUSTER) over them (tests/support/cluster.py). Every process is the test's own,
killed at its end whatever happened: a test here SIGKILLs, pauses and restarts them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.cluster.replica import Bus
from tests.cluster.replica_support import Loop
from tests.support.cluster import Cluster
from tests.support.nats import NatsCluster


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    """Three routed JetStream servers, ready (a meta leader elected)."""
    with NatsCluster(tmp_path / "nats") as nc:
        yield nc


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """``make_cluster(nodes=3, sync_interval=None, **env)``: NATS servers and nodes, every
    partition owned; each one started here is killed at the end of the test."""
    started: list[Cluster] = []

    def make(nodes: int = 3, sync_interval: str | None = None, **env: str) -> Cluster:
        cluster = Cluster(
            tmp_path / f"cluster{len(started)}", nodes, sync_interval=sync_interval, env=env
        )
        started.append(cluster)
        return cluster.start()

    try:
        yield make
    finally:
        for cluster in started:
            cluster.kill()


@pytest.fixture
def lease_ms() -> int:
    """The owners' lease of the ``bus`` fixture; a module that waits leases out sets its own."""
    return 4_000


@pytest.fixture
def bus(nats_cluster: NatsCluster, lease_ms: int) -> Iterator[Bus]:
    """One process's NATS link (app/cluster/replica) to the test's servers."""
    b = Bus.start(nats_cluster.urls.split(","), replicas=3, lease_ms=lease_ms)
    yield b
    b.close()


@pytest.fixture
def loop() -> Iterator[Loop]:
    """An asyncio loop on a thread of its own (tests/cluster/replica_support.py)."""
    lp = Loop()
    yield lp
    lp.close()
