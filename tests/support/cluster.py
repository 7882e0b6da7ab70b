"""A rocktimer cluster on one machine, for the cluster tests, the cluster crash loop and the
bench: a :class:`~tests.support.nats.NatsCluster` (real ``nats-server`` processes) and N real
rocktimer nodes (``python -m app`` in cluster mode, docs/cluster.md), each on a free port and
a data dir of its own, all on loopback.

Everything is black-box: a node is found by its HTTP port, a partition's owner by the
``rocktimer_owners`` KV bucket (tests/support/nats.py), a topic's partition by the same hash
the service uses (app/cluster/layout.py). Nodes are SIGKILLed, SIGSTOPped, stopped and
started again by PID, on the same port and data dir.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from app.cluster.layout import partition_of
from tests.support.nats import NatsCluster, Owner, owners, wait_until
from tests.support.process import AppProcess

PARTITIONS = 6  # ROCKTIMER_PARTITIONS in cluster mode by default: 3 nodes own 2 each
NODE_READY_S = 45.0  # a node joins: NATS connect, buckets, standbys caught up
OWNED_TIMEOUT_S = 30.0  # every partition has a live owner


class Node(AppProcess):
    """One rocktimer node: ``python -m app`` with ROCKTIMER_CLUSTER and ROCKTIMER_NODE_ID."""

    def __init__(self, node_id: str, work_dir: Path, nats_urls: str, env: dict[str, str]) -> None:
        data = work_dir / node_id
        super().__init__(
            data,
            work_dir / f"{node_id}.log",
            {
                "ROCKTIMER_CLUSTER": nats_urls,
                "ROCKTIMER_NODE_ID": node_id,
                "ROCKTIMER_PARTITIONS": str(PARTITIONS),
                "ROCKTIMER_API_KEYS": "{}",  # open service, whatever the caller's env says
                **env,
            },
        )
        self.name = node_id
        self.node_id = node_id

    def __repr__(self) -> str:
        return f"Node({self.node_id}, port {self.port}, pid {self.proc.pid if self.proc else None})"


class Cluster:
    """NATS servers plus rocktimer nodes; a context manager that SIGKILLs every process it
    started (paused ones are resumed first), whatever happened."""

    def __init__(
        self,
        work_dir: Path,
        nodes: int = 3,
        *,
        nats_servers: int = 3,
        sync_interval: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.work_dir = work_dir
        self.nats = NatsCluster(work_dir / "nats", nats_servers, sync_interval)
        self.env = env or {}
        self.nodes = [
            Node(f"node{i + 1}", work_dir, self.nats.urls, self.env) for i in range(nodes)
        ]
        self.partitions = PARTITIONS

    # --- life cycle ------------------------------------------------------------------------

    def start(self) -> Cluster:
        try:
            self.nats.start()
            for node in self.nodes:  # the servers' ports are known once they listen
                node.extra_env = {**node.extra_env, "ROCKTIMER_CLUSTER": self.nats.urls}
                node.spawn()
            for node in self.nodes:
                self.wait_node(node)
            self.wait_served()
        except BaseException:
            self.kill()
            raise
        return self

    def wait_node(self, node: Node, timeout_s: float = NODE_READY_S) -> float:
        """Until ``node`` answers /readyz 200; the wait."""
        started = time.monotonic()
        while not node.answers():
            node.check_alive()
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"{node.node_id} not ready in {timeout_s}s: {node.tail()}")
            time.sleep(0.05)
        return time.monotonic() - started

    def live(self) -> list[Node]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def node(self, node_id: str) -> Node:
        return next(n for n in self.nodes if n.node_id == node_id)

    def kill(self) -> None:
        """SIGKILL every node and NATS server still running (the teardown)."""
        for node in self.nodes:
            if node.proc is not None:
                node.resume()
                node.kill()
        self.nats.kill()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()

    # --- partitions and owners -----------------------------------------------------------

    def partition(self, topic: str) -> int:
        return partition_of(topic, self.partitions)

    def owners(self) -> dict[int, Owner]:
        return owners(self.nats.urls, self.partitions)

    def wait_owned(
        self, timeout_s: float = OWNED_TIMEOUT_S, among: Sequence[Node] | None = None
    ) -> dict[int, Owner]:
        """Until every partition has an owner among ``among`` (default: the live nodes)."""

        def all_owned() -> dict[int, Owner] | None:
            ids = {n.node_id for n in (among if among is not None else self.live())}
            found = self.owners()
            if len(found) == self.partitions and all(o.node in ids for o in found.values()):
                return found
            return None

        return wait_until("every partition owned by a live node", all_owned, timeout_s, 0.2)

    def wait_served(
        self, timeout_s: float = OWNED_TIMEOUT_S, among: Sequence[Node] | None = None
    ) -> dict[int, Owner]:
        """Until every partition is owned among ``among`` (default: the live nodes) and
        served: a lease is taken before the copy is caught up and the engine opened, so an
        owner in KV may still answer 503 for a while; /readyz of every node says 200 and
        lists each partition on its owner once it is open."""

        def all_served() -> dict[int, Owner] | None:
            nodes = list(among if among is not None else self.live())
            found = self.owners()
            ids = {n.node_id for n in nodes}
            if len(found) != self.partitions or any(o.node not in ids for o in found.values()):
                return None
            want = {
                n.node_id: sorted(k for k, o in found.items() if o.node == n.node_id) for n in nodes
            }
            for node in nodes:
                try:
                    ready = httpx.get(f"{node.url}/readyz", timeout=2.0)
                except httpx.HTTPError:
                    return None
                if ready.status_code != 200:
                    return None
                said = {n["node"]: n["partitions"] for n in ready.json()["nodes"]}
                if any(said.get(n, []) != ks for n, ks in want.items()):
                    return None
            return found

        return wait_until("every partition served by a live node", all_served, timeout_s, 0.2)

    def owner_of(self, topic: str) -> Node:
        """The node whose lease holds ``topic``'s partition now."""
        k = self.partition(topic)
        owner = self.owners().get(k)
        if owner is None:
            raise RuntimeError(f"partition {k} of {topic!r} has no owner")
        return self.node(owner.node)

    def others(self, node: Node) -> list[Node]:
        """The live nodes other than ``node``: where clients go while it fails."""
        return [n for n in self.live() if n is not node]

    def topic_in(self, partition: int, prefix: str = "t") -> str:
        """A topic name of partition ``partition``."""
        return next(t for t in topic_names(prefix) if self.partition(t) == partition)

    def client(self, node: Node, timeout_s: float = 10.0) -> httpx.Client:
        return httpx.Client(base_url=node.url, timeout=timeout_s)


def topic_names(prefix: str) -> Iterator[str]:
    n = 0
    while True:
        yield f"{prefix}-{n}"
        n += 1
