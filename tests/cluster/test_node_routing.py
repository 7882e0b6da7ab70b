"""Any node answers any request (app/cluster/node.py, router.py, relay.py), black-box over
HTTP against real nats-server processes and real ``python -m app`` nodes given only the
cluster's URL and a name (tests/support/cluster.py):

- a message sent to one node is received through another, neither its owner;
- listings, /metrics and /readyz are gathered from every partition whichever node is asked;
- a relayed request is never relayed again;
- a node SIGKILLed: its partitions are served by the others within 10 s, every request
  meanwhile a 503 with Retry-After or an answer, never a hang; a long poll and a stream
  relayed to it end at once.
"""

from __future__ import annotations

import concurrent.futures
import signal
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.cluster.view import HANDOVER_LEASES
from tests.support.cluster import Cluster, Node
from tests.support.nats import wait_until

FAILOVER_S = 10.0  # issue 33: a killed owner's partition is writable again within this
CLIENT_TIMEOUT_S = 5.0  # a request not answered in this long is a hang
BALANCED_S = 30.0  # nodes started together settle on 2 partitions each
UNAVAILABLE = "is not served right now"


def send(node: Node, topic: str, body: str, timeout_s: float = CLIENT_TIMEOUT_S) -> httpx.Response:
    return httpx.post(
        f"{node.url}/v1/topics/{topic}/messages", json={"body": body}, timeout=timeout_s
    )


def receive(node: Node, topic: str, group: str, wait_ms: int) -> httpx.Response:
    return httpx.post(
        f"{node.url}/v1/topics/{topic}/groups/{group}/receive",
        json={"max_messages": 10, "wait_ms": wait_ms},
        timeout=wait_ms / 1000 + CLIENT_TIMEOUT_S,
    )


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) >= 1
    assert UNAVAILABLE in response.json()["detail"]


def balanced(
    cluster: Cluster, among: list[Node] | None = None, lease_s: float = 4.0
) -> dict[int, Any]:
    """Until the partitions are served evenly by ``among`` (default: every node): a node
    that started alone takes every partition and hands the others their share after, once
    they were alive HANDOVER_LEASES leases (``lease_s``: ROCKTIMER_LEASE_MS, its default)."""
    nodes = among if among is not None else cluster.nodes
    share = cluster.partitions // len(nodes)

    def check() -> dict[int, Any] | None:
        owners = cluster.wait_served(among=among)
        counts = Counter(o.node for o in owners.values())
        return owners if sorted(counts.values()) == [share] * len(nodes) else None

    timeout_s = BALANCED_S + HANDOVER_LEASES * lease_s
    return wait_until(f"{share} partitions on each node", check, timeout_s, 0.2)


def check_gathered(cluster: Cluster, node: Node, owners: dict[int, Any], topics: list[str]) -> None:
    """Listings, /readyz, /metrics of every partition, whichever node is asked."""
    listing = httpx.get(f"{node.url}/v1/topics", timeout=CLIENT_TIMEOUT_S)
    assert listing.status_code == 200, listing.text
    assert [i["topic"] for i in listing.json()["items"]] == topics
    ready = httpx.get(f"{node.url}/readyz", timeout=CLIENT_TIMEOUT_S)
    assert ready.status_code == 200, ready.text
    assert {n["node"]: (n["partitions"], n["status"]) for n in ready.json()["nodes"]} == {
        n.node_id: (sorted(k for k, o in owners.items() if o.node == n.node_id), "ready")
        for n in cluster.nodes
    }
    metrics = httpx.get(f"{node.url}/metrics", timeout=CLIENT_TIMEOUT_S).text
    up = {
        s.labels["node"]: s.value
        for f in text_string_to_metric_families(metrics)
        for s in f.samples
        if s.name == "rocktimer_node_up"
    }
    assert up == {n.node_id: 1.0 for n in cluster.nodes}
    labelled = {
        s.labels["partition"]
        for f in text_string_to_metric_families(metrics)
        for s in f.samples
        if "partition" in s.labels
    }
    assert labelled == {str(k) for k in range(cluster.partitions)}
    assert httpx.get(f"{node.url}/healthz", timeout=CLIENT_TIMEOUT_S).status_code == 200


def check_dead_letters(cluster: Cluster) -> None:
    """A group's dead letters, kept on their source topics' partitions on every node, read
    whole through any one node."""
    dead = {}
    for k in range(cluster.partitions):
        topic = cluster.topic_in(k, "dead")
        node = cluster.nodes[k % len(cluster.nodes)]
        put = httpx.put(f"{node.url}/v1/topics/{topic}/groups/dl", json={"max_attempts": 1})
        assert put.status_code == 200, put.text
        dead[send(node, topic, f"dead {k}").json()["msg_id"]] = topic
        got = receive(node, topic, "dl", wait_ms=5_000).json()["messages"]
        nacked = httpx.post(
            f"{node.url}/v1/topics/{topic}/groups/dl/nack",
            json={"receipts": [m["receipt"] for m in got]},
            timeout=CLIENT_TIMEOUT_S,
        )
        assert nacked.status_code == 200, nacked.text
    dlq = httpx.post(
        f"{cluster.nodes[0].url}/v1/topics/%25DLQ%25dl/groups/any/receive",
        json={"max_messages": 100, "wait_ms": 5_000},
        timeout=CLIENT_TIMEOUT_S + 5,
    )
    assert dlq.status_code == 200, dlq.text
    assert {m["msg_id"]: m["source_topic"] for m in dlq.json()["messages"]} == dead


def test_any_node_answers_for_any_partition(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster()
    owners = balanced(cluster)
    topics = {k: cluster.topic_in(k) for k in range(cluster.partitions)}
    for k, topic in topics.items():
        owner = cluster.node(owners[k].node)
        entry, exit_ = cluster.others(owner)  # neither owns the partition
        sent = send(entry, topic, f"to p{k}")
        assert sent.status_code == 201, sent.text
        got = receive(exit_, topic, "g", wait_ms=5_000)
        assert got.status_code == 200, got.text
        messages = got.json()["messages"]
        assert [(m["msg_id"], m["body"]) for m in messages] == [(sent.json()["msg_id"], f"to p{k}")]
        acked = httpx.post(
            f"{entry.url}/v1/topics/{topic}/groups/g/ack",
            json={"receipts": [messages[0]["receipt"]]},
            timeout=CLIENT_TIMEOUT_S,
        )
        assert acked.json()["results"][0]["status"] == "acked"
        state = httpx.get(f"{owner.url}/v1/topics/{topic}/messages/{sent.json()['msg_id']}")
        assert state.json()["state"] == "delivered"

    for node in cluster.nodes:
        check_gathered(cluster, node, owners, sorted(topics.values()))

    # A relayed request is answered by its receiver or refused, never relayed again.
    k = 0
    owner = cluster.node(owners[k].node)
    stranger = cluster.others(owner)[0]
    hop = {"Rocktimer-Forwarded": "elsewhere"}
    again = httpx.post(
        f"{stranger.url}/v1/topics/{topics[k]}/messages",
        json={"body": "x"},
        headers=hop,
        timeout=CLIENT_TIMEOUT_S,
    )
    assert_unavailable(again)
    at_owner = httpx.post(
        f"{owner.url}/v1/topics/{topics[k]}/messages",
        json={"body": "x"},
        headers=hop,
        timeout=CLIENT_TIMEOUT_S,
    )
    assert at_owner.status_code == 201, at_owner.text
    # A gathering node asks another for exactly the partitions it owns, or gets a 503.
    own = sorted(j for j, o in owners.items() if o.node == owner.node_id)
    asked = {**hop, "Rocktimer-Partitions": ",".join(map(str, own))}
    part = httpx.get(f"{owner.url}/v1/topics", headers=asked, timeout=CLIENT_TIMEOUT_S)
    assert [i["topic"] for i in part.json()["items"]] == sorted(topics[j] for j in own)
    asked["Rocktimer-Partitions"] = ",".join(map(str, [*own, next(iter(set(owners) - set(own)))]))
    assert_unavailable(httpx.get(f"{owner.url}/v1/topics", headers=asked, timeout=CLIENT_TIMEOUT_S))

    check_dead_letters(cluster)


def _stream_until_closed(node: Node, topic: str) -> tuple[float, int]:
    """Opens a stream through ``node``; when it ended (monotonic) and its status."""
    url = f"{node.url}/v1/topics/{topic}/groups/s/stream"
    timeout = httpx.Timeout(CLIENT_TIMEOUT_S, read=60.0)
    try:
        with httpx.stream("GET", url, timeout=timeout) as response:
            for _ in response.iter_bytes():
                pass
            return time.monotonic(), response.status_code
    except httpx.TransportError:  # cut in the middle: the stream is closed
        return time.monotonic(), 0


def test_a_killed_node_s_partitions_are_served_by_the_others_within_10_s(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster()
    owners = balanced(cluster)
    victim = cluster.node(owners[0].node)
    mine = sorted(k for k, o in owners.items() if o.node == victim.node_id)
    entry = cluster.others(victim)[0]
    topics = {k: cluster.topic_in(k, "killed") for k in mine}
    before = {}
    for k, topic in topics.items():
        sent = send(entry, topic, "before")
        assert sent.status_code == 201, sent.text
        before[k] = sent.json()["msg_id"]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        # a long poll and a stream relayed to the victim, open when it dies
        idle = cluster.topic_in(mine[0], "idle")  # nothing to receive: it waits
        polled = pool.submit(lambda: (receive(entry, idle, "g", 30_000), time.monotonic()))
        streamed = pool.submit(_stream_until_closed, entry, cluster.topic_in(mine[1], "idle"))
        time.sleep(1.0)  # both relayed by now (a late one is refused at once: also fine)
        killed_at = time.monotonic()
        victim.kill()

        poll, poll_end = polled.result(timeout=FAILOVER_S + CLIENT_TIMEOUT_S)
        stream_end, _ = streamed.result(timeout=FAILOVER_S + CLIENT_TIMEOUT_S)
    assert poll_end - killed_at < FAILOVER_S, "a relayed long poll waited for a dead owner"
    assert poll_end > killed_at  # it was waiting
    if poll.status_code != 200:
        assert_unavailable(poll)
    assert stream_end - killed_at < FAILOVER_S, "a relayed stream outlived its owner"

    # Meanwhile, every request is answered (503 + Retry-After or 201) and each of the
    # victim's partitions takes writes again within 10 s of the kill.
    writable: dict[int, float] = {}
    while len(writable) < len(mine) and time.monotonic() - killed_at < FAILOVER_S + 5:
        for k in mine:
            if k in writable:
                continue
            response = send(entry, topics[k], "during")  # a hang raises here
            if response.status_code == 201:
                writable[k] = time.monotonic() - killed_at
            else:
                assert_unavailable(response)
        time.sleep(0.1)
    assert sorted(writable) == mine, f"not writable again: {writable}"

    assert max(writable.values()) <= FAILOVER_S, writable
    # What was acknowledged before the kill is still there, on the new owners.
    for k, msg_id in before.items():
        state = httpx.get(
            f"{entry.url}/v1/topics/{topics[k]}/messages/{msg_id}", timeout=CLIENT_TIMEOUT_S
        )
        assert state.status_code == 200, state.text
    assert {o.node for k, o in cluster.owners().items() if k in mine} <= {
        n.node_id for n in cluster.others(victim)
    }


def test_requests_relayed_to_a_paused_owner_end_once_its_lease_is_over(
    make_cluster: Callable[..., Cluster],
) -> None:
    """SIGSTOP keeps the owner's sockets open (the kernel accepts for it, nothing answers):
    only the lease tells the relaying node to stop waiting. Resumed, the old owner does
    not answer from its own copy: it relays to the new owner or says 503."""
    cluster = make_cluster()
    owners = balanced(cluster)
    victim = cluster.node(owners[0].node)
    mine = sorted(k for k, o in owners.items() if o.node == victim.node_id)
    entry = cluster.others(victim)[0]
    idle = cluster.topic_in(mine[0], "idle")
    topic = cluster.topic_in(mine[1], "paused")
    lease_s = 4.0  # ROCKTIMER_LEASE_MS's default
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        polled = pool.submit(lambda: (receive(entry, idle, "g", 30_000), time.monotonic()))
        time.sleep(1.0)
        paused_at = time.monotonic()
        victim.pause()
        try:
            # relayed after the pause began: to an owner that accepts and never answers
            listed = pool.submit(
                lambda: (httpx.get(f"{entry.url}/v1/topics", timeout=30.0), time.monotonic())
            )
            sent = pool.submit(lambda: (send(entry, topic, "x", 30.0), time.monotonic()))
            for future in (polled, listed, sent):
                response, ended = future.result(timeout=FAILOVER_S + CLIENT_TIMEOUT_S)
                assert ended - paused_at < lease_s + FAILOVER_S / 2, "waited on a paused owner"
                if response.status_code not in (200, 201):
                    assert_unavailable(response)
            # the others take its partitions over
            cluster.wait_owned(among=cluster.others(victim))
        finally:
            victim.resume()
    resumed = send(victim, topic, "after")  # at once: no stale 201 from its own copy
    if resumed.status_code == 201:  # relayed to the new owner: stored there
        msg_id = resumed.json()["msg_id"]
        new_owner = cluster.node(cluster.owners()[mine[1]].node)
        assert new_owner is not victim
        found = httpx.get(f"{new_owner.url}/v1/topics/{topic}/messages/{msg_id}")
        assert found.status_code == 200, found.text
    else:
        assert_unavailable(resumed)


def test_a_node_that_joins_is_handed_its_share_with_the_data(tmp_path: Any) -> None:
    """Two nodes own 3 partitions each; a third joins: once its standby copies caught up,
    it is handed 2 (one from each), with everything written before, and the partitions
    stay writable through the hand-over but for brief 503s."""
    cluster = Cluster(tmp_path / "joined", 3)
    try:
        cluster.nats.start()
        first, second, third = cluster.nodes
        for node in (first, second):
            node.spawn()
        for node in (first, second):
            cluster.wait_node(node)
        owners = balanced(cluster, among=[first, second])  # no hand-over still going on
        topics = {k: cluster.topic_in(k, "joined") for k in range(cluster.partitions)}
        before = {}
        for k, topic in topics.items():
            sent = send(first, topic, "before")
            assert sent.status_code == 201, sent.text
            before[k] = sent.json()["msg_id"]
        third.spawn()
        cluster.wait_node(third)
        unavailable = Counter[int]()

        def handed_over() -> dict[int, Any] | None:
            for k, topic in topics.items():  # writes go on meanwhile
                response = send(first, topic, "during")
                if response.status_code != 201:
                    assert_unavailable(response)
                    unavailable[k] += 1
            found = cluster.owners()
            counts = Counter(o.node for o in found.values())
            return found if sorted(counts.values()) == [2, 2, 2] and len(found) == 6 else None

        owners = wait_until("the third node's share", handed_over, BALANCED_S, 0.1)
        assert cluster.wait_served() == owners  # the moved ones open on the third node
        for k, topic in topics.items():
            owner = cluster.node(owners[k].node)
            state = httpx.get(f"{owner.url}/v1/topics/{topic}/messages/{before[k]}")
            assert state.status_code == 200, (k, owner, state.text)
        moved = [k for k, o in owners.items() if o.node == third.node_id]
        assert len(moved) == 2
        assert set(unavailable) <= set(moved), unavailable  # only the moved ones paused
    finally:
        cluster.kill()


def test_a_stopped_node_hands_its_partitions_over_without_waiting_for_its_lease(
    make_cluster: Callable[..., Cluster],
) -> None:
    """SIGTERM: the node deletes its heartbeat and gives its leases up as it stops, so the
    others serve its partitions well before its (long) lease would have run out."""
    lease_s = 10.0
    cluster = make_cluster(ROCKTIMER_LEASE_MS=str(int(lease_s * 1000)))
    # Not while a node that started first still hands the others their share: it would be
    # stopped holding more partitions than its own, some of them moving already.
    owners = balanced(cluster, lease_s=lease_s)
    victim = cluster.node(owners[0].node)
    mine = sorted(k for k, o in owners.items() if o.node == victim.node_id)
    entry = cluster.others(victim)[0]
    topics = {k: cluster.topic_in(k, "stopped") for k in mine}
    assert victim.stop() in (0, -signal.SIGTERM)  # a clean stop (uvicorn re-raises SIGTERM)
    stopped_at = time.monotonic()
    writable: dict[int, float] = {}
    while len(writable) < len(mine) and time.monotonic() - stopped_at < lease_s:
        for k in mine:
            if k not in writable:
                response = send(entry, topics[k], "after")
                if response.status_code == 201:
                    writable[k] = time.monotonic() - stopped_at
                else:
                    assert_unavailable(response)
        time.sleep(0.1)
    assert sorted(writable) == mine, writable
    assert max(writable.values()) < lease_s / 2, writable
