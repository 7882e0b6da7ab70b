"""Figure 8: tombstone reclaim — is the due range as fast to scan after N deliveries?

One server, fresh data dir:

1. fresh: the scan-cost probe (bench/probe.py: 1000 timers due one per ms) on the empty
   store.
2. N deliveries (quick 1M, full 10M, BENCH_RECLAIM_N): a storm of N timers with one
   deliver_at_ms, loaded by batch sends, then drained (``rocktimer_pending_timers`` reads
   0). Every delivered timer key is now deleted (range tombstones for the storm's spans,
   flushed and compacted on RocksDB's schedule, and the sweeper's every minute).
3. aged: the same probe again, at once (the tombstones are as fresh as they get).

Result: the aged probe's lateness against the fresh one's; target <= 2x (mean lateness).
The probe's lateness is dominated by what a scanner round costs — a seek from the
cursor past whatever the store left behind — see bench/probe.py.

    python -m bench.reclaim
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import gauges, loader, probe, rawdb, report, scale
from bench.client import Client, run
from tests.support import process

TOPIC = "reclaim"
BODY = rawdb.BODY.decode()  # figure 4's message shape
POLL_S = 0.05
DRAIN_TIMEOUT_S = 900.0  # 10M at 100k/s takes 100 s
IDLE_TIMEOUT_S = 60.0  # a bound on waiting for RocksDB's background jobs to finish
TARGET_RATIO = 2.0
MIB = 2**20


@dataclass(frozen=True, slots=True)
class ReclaimRun:
    n: int
    fresh: probe.ProbeResult
    aged: probe.ProbeResult
    load_rate: float
    drain_s: float
    late_sends: int  # storm timers stored after their due time (straight to the log)
    disk_bytes: int  # du of the data dir when the aged probe ran
    settle_s: float  # waited after the drain for the server to be idle (flushes, compactions)
    cpu: str
    span_ms: int  # the probe's spread

    @property
    def ratio(self) -> float:
        return self.aged.mean_ms / self.fresh.mean_ms if self.fresh.mean_ms > 0 else 0.0


async def drive(port: int, pid: int, data: Path, n: int, shape: probe.Shape) -> ReclaimRun:
    await probe.probe(port, "probe-warmup", shape)  # the first rounds after start run slower
    process.wait_idle(pid, timeout_s=IDLE_TIMEOUT_S)
    fresh = await probe.probe(port, "probe-fresh", shape)
    lead = loader.lead_ms(n)
    due = loader.now_ms() + lead
    message = {"body": BODY, "deliver_at_ms": due}
    body = loader.batch_body([message] * loader.BATCH_SIZE)
    bodies = (
        body if i + loader.BATCH_SIZE <= n else loader.batch_body([message] * (n - i))
        for i in range(0, n, loader.BATCH_SIZE)
    )
    load = await loader.send_batches(
        process.HOST, port, TOPIC, bodies, deadline_s=n / loader.LOAD_RATE_FLOOR * 4 + 60
    )
    if load.stored != n:
        raise RuntimeError(f"loaded {load.stored} of {n} timers ({load.describe_failures()})")
    late_s = max(0.0, (loader.now_ms() - due) / 1e3)  # past due: the rest went to the log
    late_sends = min(n, int(late_s * load.rate))
    poller = Client(process.HOST, port)
    try:
        await asyncio.sleep(max(0.0, (due - loader.now_ms()) / 1e3))
        with process.CpuMeter(pid) as cpu:
            r = await gauges.wait_pending_zero(poller, poll_s=POLL_S, timeout_s=DRAIN_TIMEOUT_S)
        drain_s = max(0.0, r.done_wall_ns / 1e9 - due / 1e3)
    finally:
        poller.close()
    disk = process.dir_bytes(data)
    settle_s = process.wait_idle(pid, timeout_s=IDLE_TIMEOUT_S)
    with process.Profile(pid, "reclaim-aged-probe"):
        aged = await probe.probe(port, "probe-aged", shape)
    return ReclaimRun(
        n,
        fresh,
        aged,
        load.rate,
        drain_s,
        late_sends,
        disk,
        settle_s,
        cpu.describe(),
        shape.span_ms,
    )


def measure(*, n: int, shape: probe.Shape = probe.DEFAULT) -> ReclaimRun:
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-reclaim-") as tmp:
        work = Path(tmp)
        with process.service(work) as service:
            return run(lambda: drive(service.port, service.pid, process.data_dir(work), n, shape))


def rows(run_: ReclaimRun) -> list[report.Row]:
    fresh, aged = run_.fresh, run_.aged
    complete = fresh.complete and aged.complete
    notes = (
        f"storm of {run_.n:,} loaded at {run_.load_rate:,.0f} msg/s, drained in "
        f"{run_.drain_s:.1f} s ({run_.cpu}); data dir {run_.disk_bytes / MIB:,.0f} MiB; "
        f"probed after {run_.settle_s:.1f} s idle wait; "
        f"p50 {fresh.lateness.p50:.0f} -> {aged.lateness.p50:.0f} ms"
    )
    if run_.late_sends:
        notes += f"; ~{run_.late_sends:,} sent after the due time (no timer key)"
    if not complete:
        notes += f"; probe received {fresh.received}+{aged.received} of {2 * fresh.expected}"
    return [
        report.Row(
            "8",
            f"reclaim: scan-cost probe after {run_.n:,} deliveries "
            f"({fresh.expected:,} timers over {run_.span_ms:,} ms)",
            aged.describe(),
            f"fresh store {fresh.describe()}",
            f"x{run_.ratio:.2f} fresh (mean)",
            f"<= {TARGET_RATIO:.0f}x fresh",
            run_.ratio <= TARGET_RATIO and complete,
            notes,
        )
    ]


def run_figure(*, n: int, shape: probe.Shape = probe.DEFAULT) -> list[report.Row]:
    return rows(measure(n=n, shape=shape))


def main() -> None:
    s = scale.current()
    print(report.table(run_figure(n=s.reclaim_n), s.name))


if __name__ == "__main__":
    main()
