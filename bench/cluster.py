"""Figure 20: cluster mode (docs/cluster.md) against one node, in the same run.

Three sides are up at once: one node alone (``make run``), a cluster of 3 NATS servers
and 3 nodes with JetStream's default fsync policy (``sync_interval`` 2 min), and the same
with ``sync_interval: always``. Each round loads each side in turn (the order alternating):

- **batch send**: 2 keep-alive connections post batches of 1000 one-hour timers back to back
  (figure 2's load) for BATCH_S seconds;
- **single send**: 16 keep-alive connections post one timer at a time (figure 1's load,
  fewer clients) for SINGLE_S seconds.

In a cluster the load goes to the node that owns the topic's partition (a forwarded request
adds a hop, measured by tests/cluster, not here): each side's figure is what a 201 costs when
it also waits for a JetStream quorum. Ratios are cluster / single node of the same rounds;
201 latency p50/p99 is the median over rounds of each round's percentile.

Then, on the default cluster:

- **failover**: FAILOVERS times, SIGKILL the owner of the topic's partition and send through
  another node until a send is answered 201 (p50, max); the killed node is started again;
- **standby lag**: a full-speed batch producer for LAG_S seconds while the last record
  delivered to the standby (its pull consumer on the partition's subject, as JetStream's
  consumer info reports it) is compared with the subject's last seq every 100 ms (records
  behind: p50, max), and the time the standby needs to catch up once the producer stops;
- **rebuild**: a node that owns nothing is killed, its data dir removed, and started again:
  changelog records covered per second (the partition's snapshot, then the records after
  it) until the consumers it opened have read each subject up to where it ended.

    python -m bench.cluster        (or python -m bench 20)
    BENCH_CLUSTER_ROUNDS, BENCH_CLUSTER_FAILOVERS override the sizes.
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from bench import batch, loader, report, scale
from bench.bare_app import ROUTE
from bench.client import build_request, run
from bench.send import MESSAGE, LoadResult, closed_loop
from bench.stats import spread
from tests.support import process
from tests.support.cluster import Cluster, Node
from tests.support.nats import last_seq, readers

TOPIC = "bench"  # ROUTE's topic
ROUNDS = int(os.environ.get("BENCH_CLUSTER_ROUNDS", "4"))
FAILOVERS = int(os.environ.get("BENCH_CLUSTER_FAILOVERS", "20"))
BATCH_S = 3.0
SINGLE_S = 3.0
WARMUP_S = 0.5
BATCH_CONNECTIONS = 2
SINGLE_CONNECTIONS = 16
LAG_S = 5.0
SAMPLE_S = 0.1
CATCH_UP_LIMIT_S = 60.0
FAILOVER_LIMIT_S = 45.0
PROBE_TIMEOUT_S = 2.0
TARGET_BATCH_RATIO = 0.5  # the issue: cluster batch send >= 0.5 x single node
TARGET_FAILOVER_P50_S = 6.0
TARGET_FAILOVER_MAX_S = 10.0
SIDES = ("single", "cluster", "cluster always")


@dataclass
class Side:
    name: str
    server: process.ServerProcess  # where the load goes (a cluster: the topic's owner)
    batch: list[LoadResult] = field(default_factory=list)
    single: list[LoadResult] = field(default_factory=list)

    def rate(self, kind: str) -> float:
        results = self.batch if kind == "batch" else self.single
        per = loader.BATCH_SIZE if kind == "batch" else 1
        return sum(r.ok * per for r in results) / sum(r.seconds for r in results)

    def latency(self, kind: str) -> str:
        results = self.batch if kind == "batch" else self.single
        p50 = statistics.median(r.latency_ms.p50 for r in results)
        p99 = statistics.median(r.latency_ms.p99 for r in results)
        return f"p50 {p50:.1f} / p99 {p99:.1f} ms"


def batch_request(port: int) -> bytes:
    body = orjson.dumps(
        {"messages": [{"body": batch.BODY, "delay_ms": batch.DELAY_MS}] * loader.BATCH_SIZE}
    )
    path = f"/v1/topics/{TOPIC}/messages/batch"
    return build_request("POST", f"{process.HOST}:{port}", path, body)


def window(side: Side, kind: str, seconds: float) -> LoadResult:
    port, pid = side.server.port, side.server.pid
    if kind == "batch":
        request, conns, expect = batch_request(port), BATCH_CONNECTIONS, 200
    else:
        request = build_request("POST", f"{process.HOST}:{port}", ROUTE, MESSAGE)
        conns, expect = SINGLE_CONNECTIONS, 201
    return run(
        lambda: closed_loop(
            port,
            request,
            connections=conns,
            warmup_s=WARMUP_S,
            seconds=seconds,
            expect=expect,
            server_pid=pid,
        )
    )


def rounds(sides: list[Side], n: int) -> None:
    for side in sides:  # warm up: imports, first compactions, the JetStream stream's files
        window(side, "batch", 1.0)
    for r in range(n):
        for side in sides if r % 2 == 0 else list(reversed(sides)):
            side.batch.append(window(side, "batch", BATCH_S))
            side.single.append(window(side, "single", SINGLE_S))


# --- failover, standby lag, rebuild on the default cluster --------------------------------


def send_once(node: Node, msg_id: str) -> int | None:
    body = orjson.dumps({"msg_id": msg_id, "body": "failover"})
    req = urllib.request.Request(
        f"{node.url}/v1/topics/{TOPIC}/messages",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=PROBE_TIMEOUT_S) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code
    except OSError:
        return None


def failovers(cluster: Cluster, n: int) -> list[float]:
    """Seconds from the owner's SIGKILL to the first 201 through another node, n times."""
    took: list[float] = []
    for i in range(n):
        cluster.wait_owned()
        owner = cluster.owner_of(TOPIC)
        front = cluster.others(owner)[0]
        began = time.monotonic()
        owner.kill()
        for j in itertools.count():
            if send_once(front, f"failover-{i}-{j}") == 201:
                break
            if time.monotonic() - began > FAILOVER_LIMIT_S:
                raise RuntimeError(f"no 201 {FAILOVER_LIMIT_S}s after killing {owner.node_id}")
            time.sleep(0.05)
        took.append(time.monotonic() - began)
        owner.port = process.free_port()
        owner.spawn()
        cluster.wait_node(owner)
    return took


def standby_seq(cluster: Cluster, k: int) -> int | None:
    """The stream seq of the last changelog record delivered to partition ``k``'s standby
    (its pull consumer on the subject, as JetStream reports it); None: no standby."""
    seqs = [r.delivered_seq for r in readers(cluster.nats.urls) if r.partition == k]
    return max(seqs) if seqs else None


@dataclass
class Lag:
    behind: list[int]
    catch_up_s: float
    records: int


def standby_lag(cluster: Cluster) -> Lag | None:
    """Records the standby is behind the subject while a producer runs at full speed."""
    k = cluster.partition(TOPIC)
    if standby_seq(cluster, k) is None:
        return None
    owner = cluster.owner_of(TOPIC)
    first = last_seq(cluster.nats.urls, k)
    stop = threading.Event()
    behind: list[int] = []

    def sample() -> None:
        while not stop.is_set():
            seen = standby_seq(cluster, k)
            if seen is not None:
                behind.append(max(0, last_seq(cluster.nats.urls, k) - seen))
            stop.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        window(Side("lag", owner), "batch", LAG_S)
    finally:
        stop.set()
        sampler.join()
    end = last_seq(cluster.nats.urls, k)
    began = time.monotonic()
    while (seen := standby_seq(cluster, k)) is None or seen < end:
        if time.monotonic() - began > CATCH_UP_LIMIT_S:
            break
        time.sleep(0.02)
    return Lag(behind, time.monotonic() - began, end - first)


def rebuild(cluster: Cluster) -> tuple[int, float] | None:
    """(records, seconds): a node that owns nothing is killed, its data dir removed, and
    started again; it rebuilds the copies it stands by for (snapshot, then the records
    after it) until the consumers it opened have read each subject up to where it ended."""
    owners = {o.node for o in cluster.owners().values()}
    idle = [n for n in cluster.live() if n.node_id not in owners]
    node = idle[0] if idle else cluster.others(cluster.owner_of(TOPIC))[0]
    node.kill()
    shutil.rmtree(node.data_dir, ignore_errors=True)
    ends = {k: last_seq(cluster.nats.urls, k) for k in range(cluster.partitions)}
    started_at = time.time()
    began = time.monotonic()
    node.port = process.free_port()
    node.spawn()
    cluster.wait_node(node)
    while True:
        mine = [r for r in readers(cluster.nats.urls) if r.created >= started_at]
        if mine and all(r.delivered_seq >= ends[r.partition] for r in mine):
            return sum(ends[r.partition] for r in mine), time.monotonic() - began
        if time.monotonic() - began > CATCH_UP_LIMIT_S:
            return None
        time.sleep(0.05)


# --- the figure ---------------------------------------------------------------------------


def run_figure(rounds_n: int = ROUNDS, failovers_n: int = FAILOVERS) -> list[report.Row]:
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-cluster-") as tmp:
        work = Path(tmp)
        single = process.service(work / "single")
        (work / "single").mkdir()
        clusters = {
            "cluster": Cluster(work / "default"),
            "cluster always": Cluster(work / "always", sync_interval="always"),
        }
        try:
            single.start()
            for c in clusters.values():
                c.start()
            sides = [Side("single", single)] + [
                Side(name, c.owner_of(TOPIC)) for name, c in clusters.items()
            ]
            rounds(sides, rounds_n)
            clusters["cluster always"].kill()  # the rest runs on the default cluster alone
            single.stop()
            default = clusters["cluster"]
            lag = standby_lag(default)
            rebuilt = rebuild(default)
            took = failovers(default, failovers_n)
        finally:
            single.stop()
            for c in clusters.values():
                c.kill()
    return rows(sides, lag, rebuilt, took)


def rows(
    sides: list[Side], lag: Lag | None, rebuilt: tuple[int, float] | None, took: list[float]
) -> list[report.Row]:
    base = sides[0]
    out = []
    for side in sides[1:]:
        sync = "sync_interval always" if "always" in side.name else "default sync_interval (2 min)"
        for kind in ("batch", "single"):
            ratio = side.rate(kind) / base.rate(kind)
            target = kind == "batch"
            out.append(
                report.Row(
                    "20",
                    f"cluster {kind} send, {sync}",
                    f"{side.rate(kind):,.0f} msg/s",
                    f"one node {base.rate(kind):,.0f} msg/s",
                    f"{ratio:.2f}",
                    f">= {TARGET_BATCH_RATIO}" if target else "-",
                    ratio >= TARGET_BATCH_RATIO if target else None,
                    f"201 latency {side.latency(kind)} (one node {base.latency(kind)}); "
                    f"{len(side.batch)} alternating rounds",
                )
            )
    fo = spread(took)
    out.append(
        report.Row(
            "20",
            f"failover: owner SIGKILL to the next 201 ({len(took)} kills)",
            f"p50 {fo.p50:.2f} s, max {fo.max:.2f} s",
            "-",
            "-",
            f"p50 <= {TARGET_FAILOVER_P50_S:.0f} s, max <= {TARGET_FAILOVER_MAX_S:.0f} s",
            fo.p50 <= TARGET_FAILOVER_P50_S and fo.max <= TARGET_FAILOVER_MAX_S,
            "default lease (4 s); sends through another node",
        )
    )
    if lag is None or not lag.behind:
        lag_text, lag_note = "n/a", "the partition had no standby reading its subject"
    else:
        s = spread([float(b) for b in lag.behind])
        lag_text = f"p50 {s.p50:.0f} / max {s.max:.0f} records behind"
        lag_note = (
            f"{lag.records} records in {LAG_S:.0f} s of full-speed batches; "
            f"caught up {lag.catch_up_s:.2f} s after the producer stopped"
        )
    out.append(
        report.Row(
            "20", "standby lag under a full-speed producer", lag_text, "-", "-", "-", None, lag_note
        )
    )
    if rebuilt is None:
        text, note = "n/a", f"not caught up within {CATCH_UP_LIMIT_S:.0f} s"
    else:
        records, secs = rebuilt
        text, note = f"{records / secs:,.0f} records/s", f"{records} records in {secs:.1f} s"
    out.append(
        report.Row("20", "rebuild of a partition from the stream", text, "-", "-", "-", None, note)
    )
    return out


def main() -> None:
    rows_ = run_figure()
    print(report.table(rows_, scale.current().name))


if __name__ == "__main__":
    main()
