"""Figure 7: N pending far-future timers — memory, disk per timer, restart time.

One server, fresh data dir:

1. baseline restart: SIGKILL the empty server, start it again (same port, same data dir)
   and time it to ready-and-delivering (below).
2. load N timers (quick 1M, full 10M, BENCH_PENDING_N) with batch sends: due between one
   day and a year ahead in random order, 128-character random bodies (incompressible),
   server-made msg_ids. Then, once the server is idle (RocksDB's flushes and compactions
   done, at most IDLE_TIMEOUT_S), its VmRSS and VmHWM (the peak, loading included).
3. restart: SIGKILL, start again, time to ready-and-delivering: from the spawn of the new
   process until /readyz answers 200 (polled every 5 ms) and then a message sent with no
   delay has been received by a consumer (``POST .../messages`` then a long-polling
   ``receive``). Target < 2 s.
4. disk: du of the data dir once the restarted server is idle. RocksDB's recovery writes
   the replayed WAL out as SST files, so this is the flushed size; before the kill the
   data dir also held the unflushed WAL. Bytes per timer against the payload each timer
   carries (body, msg_id, deliver time).

    python -m bench.pending
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import gauges, loader, report, scale
from bench.client import Client, HttpError, run
from tests.support import process

TOPIC = "pending"
PROBE_TOPIC = "restart"
GROUP = "restart"
SEED = 7
READY_POLL_S = 0.005
RESTART_TIMEOUT_S = 120.0  # a bound on one restart (WAL replay included)
RECEIVE_WAIT_MS = 5_000
IDLE_TIMEOUT_S = 60.0  # a bound on waiting for RocksDB's background jobs to finish
LOAD_RATE_FLOOR = 5_000  # msg/s: bounds the load phase (10M in at most ~35 min)
TARGET_RSS_MIB = 500
TARGET_RESTART_S = 2.0
PAYLOAD_BYTES = 128 + 26 + 8  # per timer: body, server-made msg_id, deliver_at
MIB = 2**20
KIB_PER_MIB = 1024


@dataclass(frozen=True, slots=True)
class Restart:
    ready_s: float  # spawn -> /readyz 200
    delivered_s: float  # spawn -> the probe message received

    def describe(self) -> str:
        return f"{self.delivered_s:.2f} s"


async def timed_restart(service: process.ServerProcess, probe_id: str) -> Restart:
    """SIGKILL ``service``, spawn it again, time it to ready and to a delivered message."""
    service.kill()
    client = Client(process.HOST, service.port, timeout_s=30.0)
    started = time.monotonic()
    service.spawn()
    try:
        deadline = started + RESTART_TIMEOUT_S
        while True:
            service.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"not ready {RESTART_TIMEOUT_S:.0f} s after a restart")
            try:
                r = await client.call("GET", "/readyz")
                if r.status == 200:
                    break
            except (OSError, HttpError, TimeoutError):  # not listening yet
                client.close()
            await asyncio.sleep(READY_POLL_S)
        ready_s = time.monotonic() - started
        r = await client.call(
            "POST", f"/v1/topics/{PROBE_TOPIC}/messages", {"msg_id": probe_id, "body": "restart"}
        )
        if r.status != 201:
            raise HttpError(f"send after restart: {r.status} {r.body[:300]!r}")
        path = f"/v1/topics/{PROBE_TOPIC}/groups/{GROUP}/receive"
        for _ in range(3):  # a long poll returns at the first message; bounded
            r = await client.call("POST", path, {"max_messages": 10, "wait_ms": RECEIVE_WAIT_MS})
            if r.status != 200:
                raise HttpError(f"receive after restart: {r.status} {r.body[:300]!r}")
            if any(m["msg_id"] == probe_id for m in r.json()["messages"]):
                return Restart(ready_s, time.monotonic() - started)
        raise RuntimeError("the message sent after the restart was not received")
    finally:
        client.close()


@dataclass(frozen=True, slots=True)
class PendingRun:
    n: int
    load_rate: float
    pending_loaded: int  # the gauge after the load
    pending_restarted: int  # the gauge after the restart
    idle_rss_kib: int  # the empty server
    rss_kib: int  # loaded, idle
    hwm_kib: int  # the peak of the loaded server's life
    rss_restarted_kib: int
    disk_live: int  # du before the kill (WAL included)
    disk_flushed: int  # du after the restart, idle
    baseline: Restart  # the empty store's restart
    restart: Restart


async def _gauge(port: int) -> int:
    client = Client(process.HOST, port)
    try:
        return int(await gauges.read(client, gauges.PENDING))
    finally:
        client.close()


async def drive(service: process.ServerProcess, data: Path, n: int) -> PendingRun:
    idle_rss = process.status_kib(service.pid, "VmRSS")
    baseline = await timed_restart(service, "baseline")
    load = await loader.send_batches(
        process.HOST,
        service.port,
        TOPIC,
        loader.far_future_bodies(n, seed=SEED),
        deadline_s=n / LOAD_RATE_FLOOR + 60,
    )
    if load.stored != n:
        raise RuntimeError(f"loaded {load.stored} of {n} timers ({load.describe_failures()})")
    pending_loaded = await _gauge(service.port)
    process.wait_idle(service.pid, timeout_s=IDLE_TIMEOUT_S)
    rss = process.status_kib(service.pid, "VmRSS")
    hwm = process.status_kib(service.pid, "VmHWM")
    disk_live = process.dir_bytes(data)
    restart = await timed_restart(service, "loaded")
    pending_restarted = await _gauge(service.port)
    process.wait_idle(service.pid, timeout_s=IDLE_TIMEOUT_S)
    return PendingRun(
        n=n,
        load_rate=load.rate,
        pending_loaded=pending_loaded,
        pending_restarted=pending_restarted,
        idle_rss_kib=idle_rss,
        rss_kib=rss,
        hwm_kib=hwm,
        rss_restarted_kib=process.status_kib(service.pid, "VmRSS"),
        disk_live=disk_live,
        disk_flushed=process.dir_bytes(data),
        baseline=baseline,
        restart=restart,
    )


def measure(*, n: int) -> PendingRun:
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-pending-") as tmp:
        work = Path(tmp)
        with process.service(work) as service:
            return run(lambda: drive(service, process.data_dir(work), n))


def rows(r: PendingRun) -> list[report.Row]:
    rss, hwm = r.rss_kib / KIB_PER_MIB, r.hwm_kib / KIB_PER_MIB
    per_timer = r.disk_flushed / r.n
    counted = r.pending_loaded == r.n and r.pending_restarted == r.n
    gauge_note = (
        f"rocktimer_pending_timers {r.pending_loaded:,}, after restart {r.pending_restarted:,}"
    )
    return [
        report.Row(
            "7",
            f"pending: {r.n:,} far-future timers, server memory",
            f"VmRSS {rss:,.0f} MiB (VmHWM {hwm:,.0f} MiB)",
            f"empty server {r.idle_rss_kib / KIB_PER_MIB:,.0f} MiB",
            f"x{r.rss_kib / r.idle_rss_kib:.1f} empty" if r.idle_rss_kib else "n/a",
            f"< {TARGET_RSS_MIB} MiB",
            rss < TARGET_RSS_MIB and hwm < TARGET_RSS_MIB and counted,
            f"after the restart {r.rss_restarted_kib / KIB_PER_MIB:,.0f} MiB; loaded at "
            f"{r.load_rate:,.0f} msg/s; {gauge_note}",
        ),
        report.Row(
            "7",
            f"pending: disk per timer, {r.n:,} timers",
            f"{per_timer:,.0f} B/timer ({r.disk_flushed / MIB:,.0f} MiB)",
            f"payload {PAYLOAD_BYTES} B/timer (random body, msg_id, due)",
            f"x{per_timer / PAYLOAD_BYTES:.2f} payload",
            "-",
            None,
            f"du after the restart (WAL flushed to SSTs); before the kill "
            f"{r.disk_live / MIB:,.0f} MiB with the WAL",
        ),
        report.Row(
            "7",
            f"restart with {r.n:,} pending: SIGKILL -> ready and delivering",
            r.restart.describe(),
            f"empty store {r.baseline.describe()}",
            report.ratio(r.restart.delivered_s, r.baseline.delivered_s),
            f"< {TARGET_RESTART_S:.0f} s",
            r.restart.delivered_s < TARGET_RESTART_S,
            f"/readyz 200 after {r.restart.ready_s:.2f} s (empty: {r.baseline.ready_s:.2f} s), "
            f"then send + receive {r.restart.delivered_s - r.restart.ready_s:.3f} s",
        ),
    ]


def run_figure(*, n: int) -> list[report.Row]:
    return rows(measure(n=n))


def main() -> None:
    s = scale.current()
    print(report.table(run_figure(n=s.pending_n), s.name))


if __name__ == "__main__":
    main()
