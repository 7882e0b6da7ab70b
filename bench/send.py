"""Figure 1: durable single sends over HTTP, 64 keep-alive clients, vs a bare FastAPI app.

Each client sends ``POST /v1/topics/bench/messages`` with a small body and a one-hour
``delay_ms`` (so every message becomes a timer, fsynced before its 201), waits for the
answer and sends again (closed loop). The ceiling is bench/bare_app.py, driven by the same
client with the same requests under the same uvicorn settings, in the same run.

    python -m bench.send
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench import report, scale
from bench.bare_app import ROUTE  # the service's send path for topic "bench"
from bench.client import Connection, build_request, run
from bench.stats import Spread, spread
from tests.support import process

CONNECTIONS = 64  # concurrent keep-alive clients, as the figure is defined
MESSAGE = b'{"body":"hello, rocktimer","delay_ms":3600000}'  # 1 h: no timer falls due meanwhile
REQUEST_TIMEOUT_S = 30.0  # one send; a healthy one takes milliseconds
MAX_REQUESTS_PER_CONNECTION = 1_000_000  # a bound on the loop; time ends it long before
TARGET_RATIO = 0.75


@dataclass(frozen=True, slots=True)
class LoadResult:
    ok: int  # answers with the expected status inside the window
    errors: Counter[int]  # other statuses inside the window
    seconds: float
    latency_ms: Spread
    cpu: str

    @property
    def rate(self) -> float:
        return self.ok / self.seconds


async def closed_loop(
    port: int,
    request: bytes,
    *,
    connections: int,
    warmup_s: float,
    seconds: float,
    expect: int,
    server_pid: int,
) -> LoadResult:
    """``connections`` clients each send ``request`` back to back; count a window of it.

    Requests are counted (and timed) when they start and end inside the window that
    follows ``warmup_s``; CPU is metered over the same window.
    """
    conns: list[Connection] = []
    try:
        for _ in range(connections):
            conns.append(await Connection.open(process.HOST, port))
        return await _run_window(conns, request, warmup_s, seconds, expect, server_pid)
    finally:
        for conn in conns:
            conn.close()


async def _run_window(
    conns: list[Connection],
    request: bytes,
    warmup_s: float,
    seconds: float,
    expect: int,
    server_pid: int,
) -> LoadResult:
    begin = time.perf_counter_ns()
    start = begin + int(warmup_s * 1e9)
    end = start + int(seconds * 1e9)
    latencies: list[int] = []
    errors: Counter[int] = Counter()
    meter = process.CpuMeter(server_pid)

    async def client(conn: Connection) -> None:
        for _ in range(MAX_REQUESTS_PER_CONNECTION):
            sent = time.perf_counter_ns()
            if sent >= end:
                return
            response = await conn.request(request, REQUEST_TIMEOUT_S)
            if sent < start or response.done_ns > end:
                continue
            if response.status == expect:
                latencies.append(response.done_ns - sent)
            else:
                errors[response.status] += 1

    async def window() -> None:
        await asyncio.sleep((start - time.perf_counter_ns()) / 1e9)
        with meter:
            await asyncio.sleep((end - time.perf_counter_ns()) / 1e9)

    await asyncio.gather(window(), *(client(c) for c in conns))
    return LoadResult(
        ok=len(latencies),
        errors=errors,
        seconds=seconds,
        latency_ms=spread([ns / 1e6 for ns in latencies]),
        cpu=meter.describe(),
    )


def measure(
    server: process.ServerProcess, *, connections: int, warmup_s: float, seconds: float
) -> LoadResult:
    request = build_request("POST", f"{process.HOST}:{server.port}", ROUTE, MESSAGE)
    with process.Profile(server.pid, f"send-{server.name.replace(' ', '-')}"):
        return run(
            lambda: closed_loop(
                server.port,
                request,
                connections=connections,
                warmup_s=warmup_s,
                seconds=seconds,
                expect=201,
                server_pid=server.pid,
            )
        )


def run_figure(
    *, connections: int = CONNECTIONS, warmup_s: float, seconds: float
) -> list[report.Row]:
    """Bare app first, then the service, each a fresh process; returns the table rows."""
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-send-") as tmp:
        work = Path(tmp)
        with process.bare_app(work) as bare:
            ceiling = measure(bare, connections=connections, warmup_s=warmup_s, seconds=seconds)
        with process.service(work) as service:
            result = measure(service, connections=connections, warmup_s=warmup_s, seconds=seconds)
    ratio = result.rate / ceiling.rate if ceiling.rate else 0.0
    errors = ", ".join(f"{n} x {s}" for s, n in sorted(result.errors.items()))
    return [
        report.Row(
            "1",
            f"durable single send, {connections} keep-alive clients",
            f"{result.rate:,.0f} req/s",
            f"bare FastAPI+orjson {ceiling.rate:,.0f} req/s",
            f"{ratio:.2f}",
            f">= {TARGET_RATIO}",
            ratio >= TARGET_RATIO and not result.errors,
            f"{result.cpu} (bare: {ceiling.cpu})" + (f"; errors {errors}" if errors else ""),
        ),
        report.Row(
            "1",
            "single send latency",
            result.latency_ms.ms(),
            f"bare {ceiling.latency_ms.ms()}",
            f"p99 x{result.latency_ms.p99 / ceiling.latency_ms.p99:.1f}",
            "-",
            None,
            f"{result.seconds:.0f} s window after {warmup_s:.0f} s warm-up",
        ),
    ]


def main() -> None:
    s = scale.current()
    rows = run_figure(warmup_s=s.send_warmup_s, seconds=s.send_seconds)
    print(report.table(rows, s.name))


if __name__ == "__main__":
    main()
