"""Figure 4: a storm of N timers due at the same instant — drain rate and server memory.

N timers (quick 200k, full 1M, BENCH_STORM_N overrides) are loaded with batch sends, all
with one deliver_at_ms in the future. From that instant, /metrics is polled every 20 ms
until ``rocktimer_pending_timers`` reads 0: drain rate = N / (that moment - the instant).
The server's VmRSS is sampled every 50 ms from start to stop (peak reported, with VmHWM).

Counting: after the drain, one consumer receives (and acks) the whole topic and counts
distinct msg_ids, which must be N; ``rocktimer_delivered_timers`` must read N too.

The ceiling, in the same run and in this process: rawdb.move_ceiling, a bare loop doing
the deliverer's RocksDB work (scan, multi-get, log + index writes, range delete) on N
timers of the same shape. The memory reference is the same server's RSS when idle.

    python -m bench.storm
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import consumer, gauges, loader, rawdb, report, scale
from bench.client import Client, Response, run
from bench.gauges import metric, metrics
from tests.support import process

TOPIC = "storm"
GROUP = "bench"
BODY = rawdb.BODY.decode()  # the ceiling's message shape
POLL_S = 0.02  # /metrics every 20 ms, as the figure is defined
DRAIN_TIMEOUT_S = 300.0  # a bound on the drain: 1M at the target rate takes 5 s
CONSUME_RATE_FLOOR = 5_000  # msg/s assumed for reading the storm back: bounds that phase
CONSUME_MIN_S = 30.0
TARGET_DRAIN_PER_S = 200_000
TARGET_RSS_MIB = 1024
KIB_PER_MIB = 1024


@dataclass(frozen=True, slots=True)
class Storm:
    n: int
    load_rate: float
    drain_s: float
    pending_before: int
    distinct_received: int
    delivered_counter: int
    consume_rate: float
    idle_rss_kib: int
    cpu: str


async def drive(port: int, pid: int, n: int, idle_rss_kib: int) -> Storm:
    due = loader.now_ms() + loader.lead_ms(n)
    message = {"body": BODY, "deliver_at_ms": due}
    body = loader.batch_body([message] * loader.BATCH_SIZE)
    bodies = (
        body if i + loader.BATCH_SIZE <= n else loader.batch_body([message] * (n - i))
        for i in range(0, n, loader.BATCH_SIZE)
    )
    load = await loader.send_batches(
        process.HOST, port, TOPIC, bodies, deadline_s=loader.lead_ms(n) / 1e3
    )
    if load.stored != n:
        raise RuntimeError(f"loaded {load.stored} of {n} timers ({load.describe_failures()})")
    if loader.now_ms() >= due:
        raise RuntimeError(f"loading took {load.seconds:.1f} s, past the storm's due time")

    poller = Client(process.HOST, port)
    try:
        text, _ = await metrics(poller)
        pending_before = int(metric(text, gauges.PENDING))
        await asyncio.sleep(max(0.0, (due - loader.now_ms()) / 1e3))
        with process.CpuMeter(pid) as cpu, process.Profile(pid, "storm-drain"):
            r = await gauges.wait_pending_zero(poller, poll_s=POLL_S, timeout_s=DRAIN_TIMEOUT_S)
            drained_ms = r.done_wall_ns / 1e6

        seen: set[str] = set()

        def count(messages: list[dict[str, Any]], _: Response) -> None:
            seen.update(m["msg_id"] for m in messages)

        got = await consumer.consume(
            process.HOST,
            port,
            TOPIC,
            GROUP,
            expected=n,
            timeout_s=max(CONSUME_MIN_S, n / CONSUME_RATE_FLOOR),
            on_batch=count,
        )
        # Read after the drain's last commit has surely been counted (the counter moves
        # a moment after the pending gauge, when the deliverer's call returns).
        text, _ = await metrics(poller)
        delivered_counter = int(metric(text, gauges.DELIVERED))
    finally:
        poller.close()
    return Storm(
        n=n,
        load_rate=load.rate,
        drain_s=(drained_ms - due) / 1e3,
        pending_before=pending_before,
        distinct_received=len(seen),
        delivered_counter=delivered_counter,
        consume_rate=got.received / got.seconds if got.seconds else 0.0,
        idle_rss_kib=idle_rss_kib,
        cpu=cpu.describe(),
    )


@dataclass(frozen=True, slots=True)
class StormRun:
    result: Storm
    ceiling: float  # timers/s of the raw rocksdict move loop
    peak_rss_kib: int
    rss_samples: int
    hwm_kib: int

    @property
    def rate(self) -> float:
        """Timers/s drained from the due instant until pending read 0."""
        drain_s = self.result.drain_s
        return self.result.n / drain_s if drain_s > 0 else float("inf")


def measure(*, n: int) -> StormRun:
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-storm-") as tmp:
        work = Path(tmp)
        ceiling = rawdb.move_ceiling(work / "ceiling", n)
        with process.service(work) as service, process.RssSampler(service.pid) as rss:
            idle = process.status_kib(service.pid, "VmRSS")
            result = run(lambda: drive(service.port, service.pid, n, idle))
            hwm = process.status_kib(service.pid, "VmHWM")
    return StormRun(result, ceiling, rss.peak_kib, rss.samples, hwm)


def run_figure(*, n: int) -> list[report.Row]:
    return rows(measure(n=n))


def rows(run_: StormRun) -> list[report.Row]:
    result, ceiling, hwm, n = run_.result, run_.ceiling, run_.hwm_kib, run_.result.n
    rate = run_.rate
    peak_mib = run_.peak_rss_kib / KIB_PER_MIB
    complete = result.distinct_received == n and result.delivered_counter == n
    return [
        report.Row(
            "4",
            f"storm: {n:,} timers due at one instant, drain rate",
            f"{rate:,.0f} timers/s ({result.drain_s:.2f} s)",
            f"raw rocksdict move loop {ceiling:,.0f} timers/s",
            f"{rate / ceiling:.2f}",
            f">= {TARGET_DRAIN_PER_S:,}/s",
            rate >= TARGET_DRAIN_PER_S and complete,
            f"pending before {result.pending_before:,}; {result.cpu}; "
            f"loaded at {result.load_rate:,.0f} msg/s",
        ),
        report.Row(
            "4",
            "storm: server memory, whole run",
            f"peak RSS {peak_mib:,.0f} MiB (VmHWM {hwm / KIB_PER_MIB:,.0f} MiB)",
            f"idle server {result.idle_rss_kib / KIB_PER_MIB:,.0f} MiB",
            f"x{run_.peak_rss_kib / result.idle_rss_kib:.1f} idle",
            f"< {TARGET_RSS_MIB:,} MiB",
            peak_mib < TARGET_RSS_MIB and hwm / KIB_PER_MIB < TARGET_RSS_MIB,
            f"{run_.rss_samples:,} samples",
        ),
        report.Row(
            "4",
            "storm: delivered, read back by a consumer",
            f"{result.distinct_received:,} distinct msg_ids",
            f"{n:,} sent",
            f"{result.distinct_received / n:.2f}",
            "all",
            complete,
            f"rocktimer_delivered_timers_total {result.delivered_counter:,}; "
            f"read back at {result.consume_rate:,.0f} msg/s",
        ),
    ]


def main() -> None:
    s = scale.current()
    print(report.table(run_figure(n=s.storm_n), s.name))


if __name__ == "__main__":
    main()
