"""Partitions and workers over real processes (app/cluster/): a supervisor, its worker
processes on one port, each partition's RocksDB in its own directory; real SIGKILLs."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.cluster import handoff
from bench import hop
from storage.store import BLOCK_CACHE_BYTES, WRITE_BUFFER_BYTES, RocksStore
from tests.support import process
from tests.support.process import ROOT
from tests.support.server import Server
from workers.ops import views

pytestmark = pytest.mark.slow

JSON = {"content-type": "application/json"}
RESTART_BOUND_S = 10.0  # generous for a loaded CI core; the measured restart is ~1.5 s


def owner_partition(topic: str, partitions: int) -> int:
    return zlib.crc32(topic.encode()) % partitions


def topics_of(partition: int, partitions: int, n: int, prefix: str = "t") -> list[str]:
    """``n`` topic names that belong to ``partition``."""
    found: list[str] = []
    i = 0
    while len(found) < n:
        name = f"{prefix}{i}"
        if owner_partition(name, partitions) == partition:
            found.append(name)
        i += 1
    return found


def workers_of(srv: Server) -> dict[int, int]:
    return process.workers_of(srv.pid)


def gone(pid: int) -> bool:
    """Exited and reaped by the supervisor: its sockets are closed (a zombie leader may
    still have threads holding them)."""
    return not Path(f"/proc/{pid}").exists()


def stored_topics(data: Path, partition: int) -> set[str]:
    store = RocksStore(data / f"p{partition}")
    try:
        return {t.topic for t in views.topics(store, None, 1_000)[0]}
    finally:
        store.close()


def test_each_topic_is_answered_by_its_owner(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client], tmp_path: Path
) -> None:
    srv = cluster(workers=2, partitions=4)
    c = fresh_client(srv)
    topics = [f"topic-{i}" for i in range(12)]
    assert {owner_partition(t, 4) for t in topics} == {0, 1, 2, 3}
    for t in topics:  # each send over a new connection: to whichever worker the kernel picks
        for n in range(3):
            r = c.post(
                f"/v1/topics/{t}/messages", json={"msg_id": f"m{n}", "body": t}, headers=JSON
            )
            assert r.status_code == 201, r.text
            assert r.json()["topic"] == t
        assert c.get(f"/v1/topics/{t}/messages/m1").json()["state"] == "delivered"
    for t in topics:  # received via any worker: the same messages, once
        got = []
        for _ in range(6):
            r = c.post(f"/v1/topics/{t}/groups/g/receive", json={"max_messages": 1}, headers=JSON)
            assert r.status_code == 200, r.text
            got += r.json()["messages"]
        assert sorted(m["msg_id"] for m in got) == ["m0", "m1", "m2"]
        assert {m["body"] for m in got} == {t}
        acked = c.post(
            f"/v1/topics/{t}/groups/g/ack", json={"receipts": [m["receipt"] for m in got]}
        )
        assert [x["status"] for x in acked.json()["results"]] == ["acked"] * 3
    srv.stop()
    data = tmp_path / "data"
    assert not (data / "CURRENT").exists()  # no store at the root: one per partition
    for k in range(4):
        assert stored_topics(data, k) == {t for t in topics if owner_partition(t, 4) == k}


def test_streams_and_long_polls_cross_the_hop(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client]
) -> None:
    srv = cluster(workers=2, partitions=2)
    assert set(workers_of(srv)) == {0, 1}  # two processes, each topic owned by one
    c = fresh_client(srv)
    topics = topics_of(0, 2, 2, "s") + topics_of(1, 2, 2, "s")
    events: dict[str, list[str]] = {t: [] for t in topics}

    def stream(topic: str, group: str) -> None:
        with (
            httpx.Client(base_url=srv.url, timeout=10) as own,
            own.stream("GET", f"/v1/topics/{topic}/groups/{group}/stream") as r,
        ):
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data:"):
                    events[topic].append(line)
                    return

    threads = [threading.Thread(target=stream, args=(t, g)) for t in topics for g in ("a", "b")]
    polls: dict[str, list[object]] = {}

    def poll(topic: str) -> None:
        r = c.post(f"/v1/topics/{topic}/groups/lp/receive", json={"wait_ms": 8000}, headers=JSON)
        polls[topic] = r.json()["messages"]

    threads += [threading.Thread(target=poll, args=(t,)) for t in topics]
    for thread in threads:
        thread.start()
    time.sleep(1)  # the streams and polls are open and waiting
    for t in topics:
        body = {"msg_id": "x", "body": "hello"}
        assert c.post(f"/v1/topics/{t}/messages", json=body, headers=JSON).status_code == 201
    for thread in threads:
        thread.join(timeout=15)
    assert all(len(events[t]) == 2 for t in topics), events  # each stream got its message
    assert all(len(polls[t]) == 1 for t in topics), polls


def test_topic_listing_is_merged_with_stable_cursors(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client]
) -> None:
    srv = cluster(workers=2, partitions=3)
    assert set(workers_of(srv)) == {0, 1}  # the names are spread over two processes
    c = fresh_client(srv)
    names = [f"list-{i:02d}" for i in range(14)]
    assert {owner_partition(t, 3) for t in names} == {0, 1, 2}
    for t in names:
        assert c.post(f"/v1/topics/{t}/messages", json={"body": "x"}, headers=JSON).is_success

    def pages(limit: int) -> list[list[str]]:
        out, cursor = [], None
        while True:
            params = {"limit": limit, **({"cursor": cursor} if cursor else {})}
            r = c.get("/v1/topics", params=params)
            assert r.status_code == 200, r.text
            out.append([i["topic"] for i in r.json()["items"]])
            cursor = r.json().get("next_cursor")
            if cursor is None:
                return out

    for limit in (1, 4, 5, 14, 100):
        got = pages(limit)
        assert [t for page in got for t in page] == names, limit
        assert all(len(p) == limit for p in got[:-1])
        assert pages(limit) == got  # the same pages, whichever worker answers
    first = c.get("/v1/topics", params={"limit": 5}).json()
    # A topic made after the first page, sorting before its cursor, never shifts the rest.
    assert c.post("/v1/topics/list-00a/messages", json={"body": "x"}, headers=JSON).is_success
    second = c.get("/v1/topics", params={"limit": 5, "cursor": first["next_cursor"]}).json()
    assert [i["topic"] for i in second["items"]] == names[5:10]
    assert c.get("/v1/topics", params={"limit": 0}).status_code == 422  # still validated
    assert c.get("/v1/topics", params={"cursor": "!!"}).status_code == 422


def test_readyz_and_metrics_cover_every_partition(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client]
) -> None:
    srv = cluster(workers=2, partitions=4)
    c = fresh_client(srv)
    for k in range(4):
        t = topics_of(k, 4, 1, "m")[0]
        body = {"body": "later", "delay_ms": 3_600_000}
        assert c.post(f"/v1/topics/{t}/messages", json=body, headers=JSON).status_code == 201
    for _ in range(4):  # whichever worker answers
        ready = c.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["pending_timers"] == 4
        text = c.get("/metrics").text
        for k in range(4):
            assert f'rocktimer_pending_timers{{partition="{k}"}} 1.0' in text
        assert text.count("# TYPE rocktimer_pending_timers gauge") == 1
        # What a client lays its requests out by: P as the data dir records it.
        assert c.get("/v1/limits").json()["partitions"] == 4


def test_sigkill_of_a_worker_others_serve_its_partitions_503_then_back(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client]
) -> None:
    srv = cluster(workers=2, partitions=2)
    c = fresh_client(srv)
    alive_topic, dead_topic = topics_of(0, 2, 1, "k")[0], topics_of(1, 2, 1, "k")[0]
    pids = workers_of(srv)
    assert set(pids) == {0, 1}
    os.kill(pids[1], signal.SIGKILL)
    killed_at = time.monotonic()
    while not gone(pids[1]):
        time.sleep(0.01)
    statuses: dict[str, list[int]] = {alive_topic: [], dead_topic: []}
    back_after = None
    n = 0
    while time.monotonic() - killed_at < RESTART_BOUND_S:
        for t in (alive_topic, dead_topic):
            n += 1
            r = c.post(f"/v1/topics/{t}/messages", json={"msg_id": f"m{n}", "body": "x"})
            statuses[t].append(r.status_code)
            if r.status_code == 503:
                assert r.headers["retry-after"] == "1"
                assert r.headers["content-type"] == "application/problem+json"
                assert "partition 1" in r.json()["detail"]
                listed = c.get("/v1/topics")  # a merge without partition 1: refused too
                assert listed.status_code in (200, 503)
                if listed.status_code == 503:
                    assert listed.headers["retry-after"] == "1"
        if statuses[dead_topic][-1] == 201:
            back_after = time.monotonic() - killed_at
            break
        time.sleep(0.02)
    assert set(statuses[alive_topic]) == {201}, statuses  # not one 5xx for the live partition
    assert back_after is not None, "the killed worker's partition never came back"
    assert set(statuses[dead_topic][:-1]) <= {503}
    assert 503 in statuses[dead_topic]  # it was down for a while, and said so
    new = workers_of(srv)
    assert new[0] == pids[0]  # only the killed one was started again
    assert new[1] != pids[1]
    assert c.get("/readyz").status_code == 200
    print(f"partition 1 served again {back_after:.2f} s after the SIGKILL")


def test_sigterm_stops_every_worker(cluster: Callable[..., Server]) -> None:
    srv = cluster(workers=2, partitions=2)
    pids = workers_of(srv)
    proc = srv.proc
    assert proc is not None
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    took = time.monotonic() - started
    assert all(gone(pid) for pid in pids.values())
    assert took < 2.0, took
    srv.proc = None


def run_app(data: Path, **env: str) -> subprocess.CompletedProcess[str]:
    settings = {"ROCKTIMER_DATA_DIR": str(data), "ROCKTIMER_PORT": "1", **env}
    return subprocess.run(
        [sys.executable, "-m", "app"],
        cwd=ROOT,
        env={**os.environ, **settings},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_data_dir_keeps_its_partition_count(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "partitions.json").write_text('{"partitions": 2, "hash": "crc32"}\n')
    for env, says in [
        ({"ROCKTIMER_PARTITIONS": "3"}, "has 2 partitions; ROCKTIMER_PARTITIONS=3"),
        ({"ROCKTIMER_WORKERS": "3"}, "ROCKTIMER_WORKERS=3 needs at least 3 partitions"),
    ]:
        done = run_app(data, **env)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert says in done.stderr
        assert done.stderr.startswith("rocktimer: ")
    # A one-partition data dir (the store at its root) cannot become two either.
    root = tmp_path / "single"
    RocksStore(root).close()
    done = run_app(root, ROCKTIMER_PARTITIONS="2", ROCKTIMER_WORKERS="2")
    assert done.returncode == 2
    assert "has 1 partition; ROCKTIMER_PARTITIONS=2" in done.stderr
    assert not (root / "partitions.json").exists()


def test_one_worker_keeps_the_one_store_layout(
    cluster: Callable[..., Server], tmp_path: Path
) -> None:
    srv = cluster(workers=1)
    with httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/topics/a/messages", json={"body": "x"}).status_code == 201
    assert workers_of(srv) == {}  # no supervisor, no worker processes: one process
    assert not list(tmp_path.glob("data/*.sock"))
    srv.stop()
    data = tmp_path / "data"
    assert (data / "CURRENT").exists()
    assert not (data / "partitions.json").exists()


def wait_ready(c: httpx.Client, deadline: float) -> None:
    """Until /readyz is 200: a restarted server's workers bind the port once their stores
    open, after the old workers let go of them (a connection is refused until then)."""
    while time.monotonic() < deadline:
        try:
            if c.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)


def test_crash_loop_with_two_workers_loses_no_acknowledged_send(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client]
) -> None:
    """Sends go on while single workers are SIGKILLed, then the whole server: every 201
    is there afterwards, and nothing answers a 5xx other than a down partition's 503."""
    srv = cluster(workers=2, partitions=4)
    c = fresh_client(srv)
    topics = [f"crash-{i}" for i in range(8)]
    acknowledged: list[tuple[str, str]] = []
    unexpected: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        for i in range(5_000):  # bounded; the test stops it long before
            if stop.is_set():
                return
            topic, msg_id = topics[i % len(topics)], f"m{i}"
            try:
                r = c.post(f"/v1/topics/{topic}/messages", json={"msg_id": msg_id, "body": "x"})
            except httpx.TransportError:
                continue  # a connection the killed worker held, or the server restarting
            if r.status_code == 201:
                acknowledged.append((topic, msg_id))
            elif r.status_code != 503 or "retry-after" not in r.headers:
                unexpected.append(f"{r.status_code} {r.text[:200]}")

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        for round_ in range(4):
            time.sleep(0.5)
            pids = workers_of(srv)
            victim = pids[round_ % 2]
            os.kill(victim, signal.SIGKILL)
            while not gone(victim):
                time.sleep(0.01)
            deadline = time.monotonic() + RESTART_BOUND_S
            while set(workers_of(srv)) != {0, 1} and time.monotonic() < deadline:
                time.sleep(0.05)
        time.sleep(0.5)
        srv.kill()  # the supervisor: its workers stop with it
        srv.start()
        time.sleep(0.5)
    finally:
        stop.set()
        producer.join(timeout=60)
    assert unexpected == []
    assert len(acknowledged) > 50, len(acknowledged)
    wait_ready(c, time.monotonic() + 3 * RESTART_BOUND_S)  # the old workers stop first
    missing = []
    for t, m in acknowledged:
        status = c.get(f"/v1/topics/{t}/messages/{m}").status_code
        if status != 200:
            missing.append((t, m, status))
    assert missing == [], srv.tail()


def test_api_keys_hold_across_the_hop_and_the_merge(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client]
) -> None:
    keys = '{"p-key": "producer", "c-key": "consumer"}'
    srv = cluster(workers=2, partitions=2, ROCKTIMER_API_KEYS=keys)
    c = fresh_client(srv)
    producer, consumer = {"authorization": "Bearer p-key"}, {"authorization": "Bearer c-key"}
    for t in topics_of(0, 2, 1, "auth") + topics_of(1, 2, 1, "auth"):
        for _ in range(4):  # over new connections: owners and relays alike
            assert c.post(f"/v1/topics/{t}/messages", json={"body": "x"}).status_code == 401
            r = c.post(f"/v1/topics/{t}/messages", json={"body": "x"}, headers=consumer)
            assert r.status_code == 403
            r = c.post(f"/v1/topics/{t}/messages", json={"body": "x"}, headers=producer)
            assert r.status_code == 201
    for _ in range(4):
        assert c.get("/v1/topics").status_code == 401
        assert c.get("/v1/topics", headers=producer).status_code == 403
        listed = c.get("/v1/topics", headers=consumer)
        assert listed.status_code == 200
        assert len(listed.json()["items"]) == 2


def test_the_console_overview_covers_every_partition(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client]
) -> None:
    srv = cluster(workers=2, partitions=3)
    c = fresh_client(srv)
    for k in range(3):
        for t in topics_of(k, 3, 2, "o"):
            later = {"body": "later", "delay_ms": 90_000}  # the second minute's bucket
            assert c.post(f"/v1/topics/{t}/messages", json=later).status_code == 201
            assert c.post(f"/v1/topics/{t}/messages", json={"body": "now"}).status_code == 201
    for _ in range(4):  # whichever worker answers
        stats = c.get("/v1/stats").json()
        assert stats["pending_timers"] == 6
        assert stats["delivered_total"] == 6
        assert stats["lateness"]["count"] == 6
        assert stats["lateness"]["p99_ms"] is not None
        assert sum(stats["due_ahead"]["counts"]) == 6
        assert stats["due_ahead"]["counts"][1] == 6


def test_one_worker_serves_every_partition_of_a_partitioned_data_dir(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client], tmp_path: Path
) -> None:
    """A data dir made with two workers, run with one: one worker process holds both
    partitions, and nothing is relayed."""
    srv = cluster(workers=2)
    c = fresh_client(srv)
    topics = topics_of(0, 2, 2, "one") + topics_of(1, 2, 2, "one")
    for t in topics:
        assert c.post(f"/v1/topics/{t}/messages", json={"body": t}).status_code == 201
    srv.stop()
    srv = cluster(workers=1)
    assert set(workers_of(srv)) == {0}
    c = fresh_client(srv)
    assert [i["topic"] for i in c.get("/v1/topics").json()["items"]] == sorted(topics)
    for t in topics:
        got = c.post(f"/v1/topics/{t}/groups/g/receive", json={"max_messages": 5}).json()
        assert [m["body"] for m in got["messages"]] == [t]
    assert c.get("/readyz").status_code == 200
    assert not (tmp_path / "data" / "CURRENT").exists()


def test_a_groups_dead_letters_are_read_from_every_partition(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client]
) -> None:
    srv = cluster(workers=2, partitions=2)
    assert set(workers_of(srv)) == {0, 1}
    c = fresh_client(srv)
    sources = topics_of(0, 2, 2, "dl") + topics_of(1, 2, 2, "dl")
    dlq = "/v1/topics/%25DLQ%25g"

    def kill(topic: str, msg_id: str) -> None:
        """Send one message and fail its only attempt: a dead letter of group g."""
        assert c.put(f"/v1/topics/{topic}/groups/g", json={"max_attempts": 1}).is_success
        body = {"msg_id": msg_id, "body": topic}
        assert c.post(f"/v1/topics/{topic}/messages", json=body).status_code == 201
        got = c.post(f"/v1/topics/{topic}/groups/g/receive", json={"max_messages": 1}).json()
        receipts = [m["receipt"] for m in got["messages"]]
        nacked = c.post(f"/v1/topics/{topic}/groups/g/nack", json={"receipts": receipts})
        assert nacked.json()["results"][0]["status"] == "nacked", nacked.text

    for t in sources:
        kill(t, f"dead-{t}")
    got = c.post(f"{dlq}/groups/reader/receive", json={"max_messages": 100}).json()["messages"]
    assert sorted(m["source_topic"] for m in got) == sorted(sources)
    assert {m["msg_id"] for m in got} == {f"dead-{t}" for t in sources}
    receipts = [m["receipt"] for m in got] + ["not-a-receipt"]
    acked = c.post(f"{dlq}/groups/reader/ack", json={"receipts": receipts}).json()["results"]
    assert [r["status"] for r in acked] == ["acked"] * len(sources) + ["unknown"]
    assert c.post(f"{dlq}/groups/reader/receive", json={}).json() == {"messages": []}
    assert c.post(f"{dlq}/groups/reader/receive", json={"max_messages": 0}).status_code == 422
    # A long poll on the DLQ returns when a dead letter arrives in any partition.
    for t in (sources[0], sources[-1]):
        started = time.monotonic()
        timer = threading.Timer(0.5, kill, args=(t, f"late-{t}"))
        timer.start()
        r = c.post(f"{dlq}/groups/reader/receive", json={"wait_ms": 10_000})
        timer.join()
        assert [m["msg_id"] for m in r.json()["messages"]] == [f"late-{t}"]
        assert time.monotonic() - started < 5


def connection_on(srv: Server, worker: int) -> socket.socket:
    """A connection to the public port that worker ``worker`` accepted."""
    pids = workers_of(srv)
    for _ in range(200):
        sock = socket.create_connection((process.HOST, srv.port), timeout=10)
        deadline = time.monotonic() + 2
        holder = None
        while holder is None and time.monotonic() < deadline:
            holder = hop.accepted_by(sock.getsockname()[1], srv.port, pids)
            time.sleep(0.005)
        if holder == worker:
            return sock
        sock.close()
    raise AssertionError(f"no connection landed on worker {worker}")


def open_streams(c: httpx.Client, partition: int) -> float:
    text = c.get("/metrics").text
    line = f'rocktimer_streams{{partition="{partition}"}} '
    return float(text.split(line, 1)[1].split()[0])


def test_a_client_leaving_a_relayed_stream_ends_it_on_the_owner(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client]
) -> None:
    srv = cluster(workers=2, partitions=2)
    c = fresh_client(srv)
    topic = topics_of(1, 2, 1, "gone")[0]  # worker 1's; the connection is worker 0's
    sock = connection_on(srv, 0)
    assert exchange(sock, "GET", "/healthz")[0] == 200  # a first request without a topic:
    # the connection stays on worker 0 (never passed), so the stream is relayed
    head = f"GET /v1/topics/{topic}/groups/g/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    sock.sendall(head.encode())
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")  # relayed: the owner's stream began
    assert open_streams(c, 1) == 1
    sock.close()
    deadline = time.monotonic() + 10
    while open_streams(c, 1) != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert open_streams(c, 1) == 0  # the owner ended it: its slots are free again


def test_readyz_and_metrics_name_each_worker_and_a_killed_one(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client]
) -> None:
    srv = cluster(workers=2, partitions=4)
    c = fresh_client(srv)
    owned = {0: [0, 2], 1: [1, 3]}
    for _ in range(4):  # whichever worker answers
        ready = c.get("/readyz").json()
        assert ready["workers"] == [
            {"worker": w, "partitions": owned[w], "status": "ready"} for w in (0, 1)
        ]
        text = c.get("/metrics").text
        for w in (0, 1):  # each worker's own series, by its label
            assert f'rocktimer_worker_up{{worker="{w}"}} 1.0' in text
            assert f'process_resident_memory_bytes{{worker="{w}"}}' in text
            assert f'process_cpu_seconds_total{{worker="{w}"}}' in text
    pids = workers_of(srv)
    os.kill(pids[1], signal.SIGKILL)
    while not gone(pids[1]):
        time.sleep(0.01)
    live = topics_of(0, 4, 1, "up")[0]
    seen_down = metrics_down = False
    deadline = time.monotonic() + RESTART_BOUND_S
    while time.monotonic() < deadline:
        ready = c.get("/readyz")
        if ready.status_code == 200:
            break
        seen_down = True
        assert ready.status_code == 503, ready.text
        assert ready.headers["retry-after"] == "1"
        assert ready.headers["content-type"] == "application/problem+json"
        assert "worker 1 (partitions 1, 3) is being started again" in ready.json()["detail"]
        assert [w["status"] for w in ready.json()["workers"]] == ["ready", "down"]
        text = c.get("/metrics").text  # the live worker's series still scraped
        if 'rocktimer_worker_up{worker="1"} 0.0' in text:
            metrics_down = True
            assert 'rocktimer_worker_up{worker="0"} 1.0' in text
            assert 'rocktimer_pending_timers{partition="0"}' in text
            assert 'rocktimer_pending_timers{partition="1"}' not in text
        assert c.post(f"/v1/topics/{live}/messages", json={"body": "x"}).status_code == 201
        time.sleep(0.02)
    assert seen_down
    assert metrics_down  # 200 without the down worker's partitions, not a 503
    assert c.get("/readyz").json()["workers"][1]["status"] == "ready"
    assert 'rocktimer_worker_up{worker="1"} 1.0' in c.get("/metrics").text


def sealed(events: Path) -> list[pa.Table]:
    return [pq.read_table(path) for path in sorted(events.rglob("part-*.parquet"))]


def test_each_partitions_sealed_events_carry_it(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client], tmp_path: Path
) -> None:
    """Every segment under ``p<k>/events/`` has the partition column, k on each row:
    (partition, seq) names an event across the data dir (seqs repeat between partitions)."""
    srv = cluster(workers=2, partitions=2, ROCKTIMER_EVENTS_SEAL_MS="50")
    c = fresh_client(srv)
    sent = {k: topics_of(k, 2, 2, "ev") for k in (0, 1)}
    for k in (0, 1):
        for t in sent[k]:
            assert c.post(f"/v1/topics/{t}/messages", json={"body": t}).status_code == 201
    events = {k: tmp_path / "data" / f"p{k}" / "events" for k in (0, 1)}

    def topics(k: int) -> set[str]:
        return {t for table in sealed(events[k]) for t in table.column("topic").to_pylist()}

    deadline = time.monotonic() + 30
    while any(topics(k) != set(sent[k]) for k in (0, 1)) and time.monotonic() < deadline:
        time.sleep(0.05)
    srv.stop()
    seen: set[tuple[int, int]] = set()
    seqs: list[int] = []
    for k in (0, 1):
        assert topics(k) == set(sent[k])
        for table in sealed(events[k]):
            assert set(table.column("partition").to_pylist()) == {k}
            rows = table.column("seq").to_pylist()
            seqs += rows
            seen |= {(k, seq) for seq in rows}
    assert len(seen) == len(seqs)  # (partition, seq) is unique
    assert len(set(seqs)) < len(seqs)  # seq alone is not


def exchange(sock: socket.socket, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    """One request on a raw keep-alive connection: (status, body)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    sock.sendall(head.encode() + b"\r\n" + body)
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed before a reply"
        got += chunk
    head_bytes, rest = got.split(b"\r\n\r\n", 1)
    length = int(
        next(
            line.split(b":", 1)[1]
            for line in head_bytes.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
    )
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed in the middle of a reply"
        rest += chunk
    return int(head_bytes.split(b" ", 2)[1]), rest[:length]


def holder(srv: Server, sock: socket.socket) -> int | None:
    """The worker holding the server side of ``sock`` now."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        found = hop.accepted_by(sock.getsockname()[1], srv.port, workers_of(srv))
        if found is not None:
            return found
        time.sleep(0.01)
    return None


def test_a_connection_is_passed_to_the_owner_of_its_first_request(
    cluster: Callable[..., Server],
) -> None:
    """Worker 0 accepted it; its first request is for worker 1's topic: from then on
    worker 1 holds the connection and answers on it (no hop), a request for worker 0's
    topic on it is relayed back, and a batch's bytes that came with it are not lost."""
    srv = cluster(workers=2, partitions=2)
    mine, theirs = topics_of(0, 2, 1, "own")[0], topics_of(1, 2, 1, "other")[0]
    sock = connection_on(srv, 0)
    try:
        batch = b'{"messages":[' + b",".join(b'{"body":"%d"}' % i for i in range(500)) + b"]}"
        status, body = exchange(sock, "POST", f"/v1/topics/{theirs}/messages/batch", batch)
        assert status == 200, body
        assert body.count(b'"status":201') == 500
        assert holder(srv, sock) == 1  # passed: the owner holds it now
        for _ in range(3):
            status, body = exchange(sock, "POST", f"/v1/topics/{theirs}/messages", b'{"body":"x"}')
            assert status == 201, body
            status, body = exchange(sock, "POST", f"/v1/topics/{mine}/messages", b'{"body":"y"}')
            assert status == 201, body  # relayed from worker 1 to worker 0
        assert holder(srv, sock) == 1  # passed once, never back
    finally:
        sock.close()
    c = httpx.Client(base_url=srv.url, timeout=10)
    counts = {t["topic"]: t for t in c.get("/v1/topics").json()["items"]}
    c.close()
    assert set(counts) == {mine, theirs}


def test_a_connection_whose_first_request_has_no_topic_is_never_passed(
    cluster: Callable[..., Server],
) -> None:
    srv = cluster(workers=2, partitions=2)
    theirs = topics_of(1, 2, 1, "other")[0]
    sock = connection_on(srv, 0)
    try:
        assert exchange(sock, "GET", "/healthz")[0] == 200
        status, body = exchange(sock, "POST", f"/v1/topics/{theirs}/messages", b'{"body":"x"}')
        assert status == 201, body
        assert holder(srv, sock) == 0  # relayed, the connection stays where it was
    finally:
        sock.close()


def test_a_first_request_for_a_dead_workers_topic_is_503_not_passed_nor_hung(
    cluster: Callable[..., Server],
) -> None:
    """The owner is down (SIGSTOP: it does not read its handoff socket, nor accept; its
    process still exists): nothing waits on it; the request is relayed, which answers 503
    with Retry-After. With the owner killed (its handoff socket gone) the same."""
    srv = cluster(workers=2, partitions=2)
    theirs = topics_of(1, 2, 1, "other")[0]
    pids = workers_of(srv)
    os.kill(pids[1], signal.SIGKILL)
    while not gone(pids[1]):
        time.sleep(0.01)
    sock = connection_on(srv, 0)
    try:
        sock.settimeout(5)
        started = time.monotonic()
        status, body = exchange(sock, "POST", f"/v1/topics/{theirs}/messages", b'{"body":"x"}')
        if status == 201:  # the supervisor already started worker 1 again: it was passed
            assert holder(srv, sock) == 1
        else:
            assert status == 503, body
            assert time.monotonic() - started < 5
            assert holder(srv, sock) == 0
    finally:
        sock.close()


def test_a_large_first_request_is_answered_whole_passed_or_relayed(
    cluster: Callable[..., Server],
) -> None:
    """A first request larger than the reads before its head ends: passed with the part
    read so far (the owner reads the rest from the connection) or, past the bytes a pass
    carries, relayed; either way every message of it stored, once."""
    srv = cluster(workers=2, partitions=2)
    theirs = topics_of(1, 2, 1, "big")[0]
    sock = connection_on(srv, 0)
    try:
        body = b"y" * 100
        batch = b'{"messages":[' + b",".join(b'{"body":"%s"}' % body for _ in range(1000)) + b"]}"
        assert len(batch) > handoff.PASS_MAX_BYTES
        status, reply = exchange(sock, "POST", f"/v1/topics/{theirs}/messages/batch", batch)
        assert status == 200, reply
        assert reply.count(b'"status":201') == 1000
        status, reply = exchange(sock, "POST", f"/v1/topics/{theirs}/messages", b'{"body":"z"}')
        assert status == 201, reply
    finally:
        sock.close()
    c = httpx.Client(base_url=srv.url, timeout=10)
    got = c.post(f"/v1/topics/{theirs}/groups/g/receive", json={"max_messages": 1000})
    c.close()
    assert len(got.json()["messages"]) == 1000  # due now, the 1001st left for the next


def pss_kib(pid: int) -> int:
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    return next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:"))


def test_the_supervisor_keeps_its_workers_as_a_small_process(
    cluster: Callable[..., Server],
) -> None:
    """Once the workers are forked the supervisor is the keeper (same PID: the workers are
    its children), a few MiB, not a copy of the service's imports; a worker it starts
    again is a process of its own, served as the others."""
    srv = cluster(workers=2, partitions=2)
    cmdline = Path(f"/proc/{srv.pid}/cmdline").read_bytes().split(b"\0")
    assert b"from app.cluster.keeper import main; main(sys.argv[2:])" in cmdline[3]
    assert pss_kib(srv.pid) < 8 * 1024  # the service's imports alone are ~40 MiB
    pids = workers_of(srv)
    assert set(pids) == {0, 1}
    os.kill(pids[0], signal.SIGKILL)
    c = httpx.Client(base_url=srv.url, timeout=10)
    deadline = time.monotonic() + RESTART_BOUND_S
    while time.monotonic() < deadline:
        now = workers_of(srv)
        if now.get(0, pids[0]) != pids[0] and c.get("/readyz").status_code == 200:
            break
        time.sleep(0.05)
    c.close()
    now = workers_of(srv)
    assert now[0] != pids[0]
    assert now[1] == pids[1]
    restarted = Path(f"/proc/{now[0]}/cmdline").read_bytes().split(b"\0")
    assert restarted[1:4] == [b"-m", b"app.cluster.worker", b"0"]


def test_a_worker_whose_keeper_died_before_it_started_exits_without_opening_its_store(
    tmp_path: Path,
) -> None:
    """The keeper starts a worker again as ``python -m app.cluster.worker <index> <its
    pid>``; killed meanwhile (a SIGKILL of the whole server), it is not the worker's parent
    by the time the worker runs: the worker exits instead of serving on, orphaned, holding
    its partitions' stores (the next start could not open them)."""
    data = tmp_path / "data"
    env = {
        **os.environ,
        "ROCKTIMER_DATA_DIR": str(data),
        "ROCKTIMER_WORKERS": "2",
        "ROCKTIMER_PARTITIONS": "2",
        "ROCKTIMER_PORT": str(process.free_port()),
    }
    not_its_parent = os.getppid()
    proc = subprocess.run(
        [sys.executable, "-m", "app.cluster.worker", "0", str(not_its_parent)],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert not (data / "p0" / "LOCK").exists()  # its store was never opened


def rocksdb_budgets(partition_dir: Path) -> tuple[set[int], set[int]]:
    """The block cache capacities and memtable sizes a store was opened with, as RocksDB
    logged them in its info LOG."""
    log = (partition_dir / "LOG").read_text()
    return (
        {int(n) for n in re.findall(r"^\s*capacity : (\d+)$", log, re.MULTILINE)},
        {int(n) for n in re.findall(r"Options\.write_buffer_size: (\d+)$", log, re.MULTILINE)},
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_partitions_divide_rocksdb_memory_budgets(
    cluster: Callable[..., Server], tmp_path: Path, workers: int
) -> None:
    """P partitions hold the memory budgets of one store whatever N runs them: each
    partition's block cache and memtables are 1/P of one store's, in a worker that holds
    one partition as in one that holds them all."""
    srv = cluster(workers=workers, partitions=2)
    assert len(workers_of(srv)) == workers
    for k in range(2):
        caches, memtables = rocksdb_budgets(tmp_path / "data" / f"p{k}")
        assert caches == {BLOCK_CACHE_BYTES // 2}, (k, caches)
        assert memtables == {WRITE_BUFFER_BYTES // 2}, (k, memtables)
