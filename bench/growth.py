"""Figure 9: the growth curve — what N pending timers cost, at 10k, 100k, 1M (and 10M).

One server, fresh data dir, the store grown step by step with far-future timers (batch
sends, due between a day and a year ahead in random order, random 128-character bodies:
figure 7's load). At each level, once the server is idle (RocksDB's flushes and
compactions done, at most IDLE_TIMEOUT_S):

- send latency: SEND_CONNECTIONS keep-alive clients each send SEND_PER_CONNECTION single
  ``POST .../messages`` (30-day delay: durable timers, 201 after the fsync) back to back
  after a short warm-up; p50/p99 over all of them. Low concurrency, so this is the
  latency of one request, not a queue.
- scan cost: the probe of bench/probe.py (1000 timers due one per ms), lateness mean/p99.
- memory: the server's VmRSS.
- restart: SIGKILL, start again, time to ready-and-delivering (figure 7's measure).
- disk: du of the data dir once the restarted server is idle: RocksDB's recovery has
  written the WAL out as SST files, so every level is measured flushed (bytes per timer
  would otherwise swing with how full the memtable and WAL happen to be).

The restart also means each level's server process has loaded only the last step itself
(the rest it found on disk); memory is dominated by RocksDB's memtables and caches, which
do not care who wrote the data.

The points go to ``bench/growth-<profile>.md`` (a Markdown table) and
``bench/growth-<profile>.png`` (a chart, matplotlib's Agg backend), and the table gets one
row per measure: first level -> last level, ratio last / first.

    python -m bench.growth
"""

from __future__ import annotations

import asyncio
import datetime
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import gauges, loader, probe, report, scale
from bench.client import Client, Connection, HttpError, build_request, run
from bench.pending import Restart, timed_restart
from bench.stats import Spread, si, spread
from tests.support import process

TOPIC = "growth"
SEND_TOPIC = "growth-send"
SEND_CONNECTIONS = 4
SEND_PER_CONNECTION = 250  # 1000 sends a level: p99 is the 10th slowest
SEND_WARMUP = 25  # per connection, not counted
SEND_BODY = b'{"body":"hello, rocktimer","delay_ms":2592000000}'  # 30 days
SEND_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 60.0
LOAD_RATE_FLOOR = 5_000  # msg/s: bounds each load step
MIB = 2**20
KIB_PER_MIB = 1024
OUT_DIR = process.ROOT / "bench"


@dataclass(frozen=True, slots=True)
class Point:
    level: int  # timers loaded by the bench
    pending: int  # rocktimer_pending_timers before the measurements
    send: Spread  # ms
    scan: probe.ProbeResult
    rss_kib: int
    disk_bytes: int  # du after a restart (flushed)
    load_rate: float  # msg/s of the load step that reached this level
    restart: Restart

    @property
    def disk_per_timer(self) -> float:
        return self.disk_bytes / self.pending if self.pending else 0.0


async def send_latency(port: int, *, connections: int, per_connection: int) -> Spread:
    """Single sends from ``connections`` clients, each back to back; latency in ms."""
    request = build_request(
        "POST", f"{process.HOST}:{port}", f"/v1/topics/{SEND_TOPIC}/messages", SEND_BODY
    )
    latencies: list[float] = []

    async def client() -> None:
        conn = await Connection.open(process.HOST, port)
        try:
            for i in range(SEND_WARMUP + per_connection):
                sent = time.perf_counter_ns()
                r = await conn.request(request, SEND_TIMEOUT_S)
                if r.status != 201:
                    raise HttpError(f"send: {r.status} {r.body[:300]!r}")
                if i >= SEND_WARMUP:
                    latencies.append((r.done_ns - sent) / 1e6)
        finally:
            conn.close()

    await asyncio.gather(*(client() for _ in range(connections)))
    return spread(latencies)


async def drive(
    service: process.ServerProcess,
    data: Path,
    levels: tuple[int, ...],
    per_connection: int,
    shape: probe.Shape,
) -> list[Point]:
    port = service.port
    await probe.probe(port, "probe-warmup", shape)  # the first rounds after start run slower
    points: list[Point] = []
    loaded = 0
    poller = Client(process.HOST, port)
    try:
        for level in levels:
            pid = service.pid  # a new process after every level's restart
            step = level - loaded
            load = await loader.send_batches(
                process.HOST,
                port,
                TOPIC,
                loader.far_future_bodies(step, seed=level),
                deadline_s=step / LOAD_RATE_FLOOR + 60,
            )
            if load.stored != step:
                raise RuntimeError(f"loaded {load.stored} of {step} ({load.describe_failures()})")
            loaded = level
            process.wait_idle(pid, timeout_s=IDLE_TIMEOUT_S)
            pending_n = int(await gauges.read(poller, gauges.PENDING))
            with process.Profile(pid, f"growth-{level}"):
                send = await send_latency(
                    port, connections=SEND_CONNECTIONS, per_connection=per_connection
                )
                scan = await probe.probe(port, f"probe-{level}", shape)
            rss = process.status_kib(pid, "VmRSS")
            restart = await timed_restart(service, f"restart-{level}")
            process.wait_idle(service.pid, timeout_s=IDLE_TIMEOUT_S)
            disk = process.dir_bytes(data)
            points.append(Point(level, pending_n, send, scan, rss, disk, load.rate, restart))
            await probe.probe(port, f"probe-warmup-{level}", shape)  # warm the new process
            print(f"[bench] growth: {describe(points[-1])}", file=sys.stderr, flush=True)
    finally:
        poller.close()
    return points


def describe(p: Point) -> str:
    return (
        f"{p.pending:,} pending: send {p.send.ms(2)}; probe {p.scan.describe()}; "
        f"RSS {p.rss_kib / KIB_PER_MIB:,.0f} MiB; disk {p.disk_bytes / MIB:,.0f} MiB; "
        f"restart {p.restart.delivered_s:.2f} s"
    )


def measure(
    *,
    levels: tuple[int, ...],
    per_connection: int = SEND_PER_CONNECTION,
    shape: probe.Shape = probe.DEFAULT,
) -> list[Point]:
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-growth-") as tmp:
        work = Path(tmp)
        with process.service(work) as service:
            return run(
                lambda: drive(service, process.data_dir(work), levels, per_connection, shape)
            )


# --- outputs ------------------------------------------------------------------------------


def markdown(points: list[Point], caption: str) -> str:
    head = (
        "| pending timers | send p50 ms | send p99 ms | scan probe mean ms | scan probe p99 ms "
        "| RSS MiB | restart s | disk MiB | disk B/timer | loaded at msg/s |"
    )
    lines = [caption, "", head, "|" + "---|" * 10]
    for p in points:
        lines.append(
            f"| {p.pending:,} | {p.send.p50:.2f} | {p.send.p99:.2f} | {p.scan.mean_ms:.2f} "
            f"| {p.scan.lateness.p99:.0f} | {p.rss_kib / KIB_PER_MIB:,.0f} "
            f"| {p.restart.delivered_s:.2f} | {p.disk_bytes / MIB:,.0f} "
            f"| {p.disk_per_timer:,.0f} | {p.load_rate:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def chart(points: list[Point], caption: str, path: Path) -> None:
    """Six panels against pending timers (log scale), saved as a PNG with Agg."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    xs = [max(p.pending, 1) for p in points]
    fig = Figure(figsize=(14, 8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3, sharex=True)
    panels: list[tuple[str, list[tuple[str, list[float]]]]] = [
        (
            "single send latency, 4 clients (ms)",
            [("p50", [p.send.p50 for p in points]), ("p99", [p.send.p99 for p in points])],
        ),
        (
            "scan probe lateness (ms)",
            [
                ("mean", [p.scan.mean_ms for p in points]),
                ("p99", [p.scan.lateness.p99 for p in points]),
            ],
        ),
        (
            "restart to ready and delivering (s)",
            [
                ("delivering", [p.restart.delivered_s for p in points]),
                ("/readyz", [p.restart.ready_s for p in points]),
            ],
        ),
        ("server RSS (MiB)", [("VmRSS", [p.rss_kib / KIB_PER_MIB for p in points])]),
        (
            "disk per pending timer (bytes)",
            [("du after restart", [p.disk_per_timer for p in points])],
        ),
        ("batch-send load rate (msg/s)", [("load step", [p.load_rate for p in points])]),
    ]
    for ax, (title, series) in zip(axes.flat, panels, strict=True):
        for label, ys in series:
            ax.plot(xs, ys, marker="o", label=label)
        ax.set_title(title)
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend()
    for ax in axes[1]:
        ax.set_xlabel("pending timers")
        ax.set_xticks(xs, [si(x) for x in xs])
    fig.suptitle(caption, fontsize=9)
    fig.savefig(str(path), dpi=100)


def write_outputs(points: list[Point], profile: str, out_dir: Path) -> tuple[Path, Path]:
    today = datetime.date.today().isoformat()
    caption = (
        f"rocktimer growth curve, {profile} profile, {today}, commit {report.revision()} — "
        f"{report.machine()}"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / f"growth-{profile}.md"
    png = out_dir / f"growth-{profile}.png"
    md.write_text(markdown(points, caption), encoding="utf-8")
    chart(points, caption, png)
    return md, png


def rows(points: list[Point], files: tuple[Path, Path]) -> list[report.Row]:
    first, last = points[0], points[-1]
    span = f"{si(first.pending)} -> {si(last.pending)} pending"
    where = " and ".join(_shown(f) for f in files)

    def row(name: str, a: float, b: float, fmt: str, unit: str, notes: str) -> report.Row:
        return report.Row(
            "9",
            f"growth: {name}, {span}",
            f"{a:{fmt}} -> {b:{fmt}} {unit}",
            f"at {si(first.pending)}: {a:{fmt}} {unit}",
            f"x{b / a:.2f}" if a > 0 else "n/a",
            "-",
            None if all(p.scan.complete for p in points) else False,
            notes,
        )

    return [
        row(
            f"single send p99, {SEND_CONNECTIONS} clients",
            first.send.p99,
            last.send.p99,
            ".2f",
            "ms",
            f"p50 {first.send.p50:.2f} -> {last.send.p50:.2f} ms; {where}",
        ),
        row(
            "scan cost (probe lateness mean)",
            first.scan.mean_ms,
            last.scan.mean_ms,
            ".2f",
            "ms",
            f"p99 {first.scan.lateness.p99:.0f} -> {last.scan.lateness.p99:.0f} ms",
        ),
        row(
            "server VmRSS",
            first.rss_kib / KIB_PER_MIB,
            last.rss_kib / KIB_PER_MIB,
            ",.0f",
            "MiB",
            "idle, after each load step (before its restart)",
        ),
        row(
            "disk per pending timer",
            first.disk_per_timer,
            last.disk_per_timer,
            ",.0f",
            "B",
            f"du after a restart (flushed): {first.disk_bytes / MIB:,.0f} -> "
            f"{last.disk_bytes / MIB:,.0f} MiB",
        ),
        row(
            "restart to ready and delivering",
            first.restart.delivered_s,
            last.restart.delivered_s,
            ".2f",
            "s",
            f"SIGKILL at each level; /readyz {first.restart.ready_s:.2f} -> "
            f"{last.restart.ready_s:.2f} s",
        ),
    ]


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(process.ROOT))
    except ValueError:
        return str(path)


def run_figure(
    *,
    levels: tuple[int, ...],
    profile: str,
    out_dir: Path = OUT_DIR,
    per_connection: int = SEND_PER_CONNECTION,
    shape: probe.Shape = probe.DEFAULT,
) -> list[report.Row]:
    points = measure(levels=levels, per_connection=per_connection, shape=shape)
    files = write_outputs(points, profile, out_dir)
    return rows(points, files)


def main() -> None:
    s = scale.current()
    print(report.table(run_figure(levels=s.growth_levels, profile=s.name), s.name))


if __name__ == "__main__":
    main()
