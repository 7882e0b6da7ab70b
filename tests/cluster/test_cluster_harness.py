"""The harness itself: three nats-server processes form one JetStream cluster (an R3 stream
is created and a publish acknowledged by a quorum), and one server can be killed and
started again on its store dir."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nats.js.api import StorageType

from tests.support.nats import NatsCluster, publish, run_client, server_config, stream_peers


def test_server_config_names_every_route_and_the_sync_policy(tmp_path: Any) -> None:
    conf = server_config("n1", 4222, 6222, 8222, [6223, 6224], tmp_path, "always")
    assert 'routes: ["nats-route://127.0.0.1:6223", "nats-route://127.0.0.1:6224"]' in conf
    assert 'sync_interval: "always"' in conf
    assert "sync_interval" not in server_config("n1", 4222, 6222, 8222, [6223], tmp_path)


def test_three_servers_form_a_jetstream_cluster(nats_cluster: NatsCluster) -> None:
    leaders = {s.meta_leader() for s in nats_cluster.servers}
    assert len(leaders) == 1
    assert leaders <= {s.name for s in nats_cluster.servers}

    async def r3(js: Any) -> tuple[int, str]:
        await js.add_stream(
            name="HARNESS", subjects=["harness.>"], num_replicas=3, storage=StorageType.FILE
        )
        ack = await publish(
            js, "harness.one", b"x", headers={"Nats-Expected-Last-Subject-Sequence": "0"}
        )
        return int(ack.seq), str(ack.stream)

    assert run_client(nats_cluster.urls, r3) == (1, "HARNESS")
    replicas, leader, peers = stream_peers(nats_cluster.urls, "HARNESS")
    assert replicas == 3
    assert {leader, *peers} == {s.name for s in nats_cluster.servers}  # a copy on each
    assert any(peers.values())  # the leader and a current follower: the quorum that acked

    # One server SIGKILLed: the other two still take writes; restarted on its store dir,
    # it rejoins and catches up.
    victim = nats_cluster.servers[0]
    victim.kill()

    async def second(js: Any) -> int:
        ack = await publish(js, "harness.two", b"y")
        return int(ack.seq)

    assert run_client(",".join(s.url for s in nats_cluster.servers[1:]), second) == 2
    victim.spawn()
    nats_cluster.wait_ready()
    assert {s.meta_leader() for s in nats_cluster.servers} == {
        nats_cluster.servers[1].meta_leader()
    }


def test_sync_interval_always_reaches_jetstream(tmp_path: Path) -> None:
    with NatsCluster(tmp_path, size=1, sync_interval="always") as one:
        config = one.servers[0].monitor("/varz")["jetstream"]["config"]
    assert config["sync_always"] is True
    with NatsCluster(tmp_path / "default", size=1) as one:
        config = one.servers[0].monitor("/varz")["jetstream"]["config"]
    assert not config.get("sync_always")
    assert config["sync_interval"] == 120_000_000_000  # ns: the server's 2-minute default
