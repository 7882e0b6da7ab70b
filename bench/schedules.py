"""Figure 13: recurring schedules at scale — fire lateness and memory.

N schedules (quick 100k, BENCH_SCHEDULES_N overrides) firing every minute
(``every_ms`` 60000), their phases spread evenly over the minute (``start_at_ms``), are
put over HTTP. Every schedule fires once in each minute; the fires of the second minute
after the start are read back by a consumer: lateness = delivered_at_ms - deliver_at_ms
(the fire time), p99 reported. The server's VmRSS at the end of that minute (before the
consumer reads it back) is compared with the same two minutes of 1k schedules firing
every second (1,000 fires/s, the nearest to N/60 that every_ms allows): the schedules
live in RocksDB, not in memory, so the two should match; RocksDB's memtables and block
cache fill with the fires' writes, so the rates must be alike for the comparison to be
about the number of schedules. Targets: p99 <= 10 ms, RSS(N) <= 1.25 x RSS(1k).

    python -m bench.schedules
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import consumer, gauges, loader, report
from bench.client import Client, run
from bench.stats import spread
from tests.support import process

TOPIC = "cron"
SMALL_N = 1_000
SMALL_EVERY_MS = 1_000  # the fastest every_ms allows: 1,000 fires/s, near 100k a minute's
ROCKSDB_MEMORY = 'rocktimer_rocksdb_memory_bytes{kind="%s"}'
DEFAULT_N = 100_000
PUT_CONCURRENCY = 64
TARGET_P99_MS = 10.0
TARGET_RSS_RATIO = 1.25
MINUTE_MS = 60_000
CONSUME_TIMEOUT_S = 300.0
PUT_LEAD_MS = 5_000  # the first phase starts this long after the puts begin, plus:
PUTS_PER_S_FLOOR = 1_000  # puts per second assumed for the lead (a slower load still works)


async def _put_all(port: int, n: int, start_ms: int, every_ms: int = MINUTE_MS) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def worker() -> None:
        client = Client(process.HOST, port)
        try:
            while not queue.empty():
                i = queue.get_nowait()
                phase = start_ms + i * every_ms // n
                body = {"every_ms": every_ms, "start_at_ms": phase, "body": "tick"}
                r = await client.call("PUT", f"/v1/topics/{TOPIC}/schedules/s{i:07d}", body)
                if r.status not in (200, 201):
                    raise RuntimeError(f"put schedule: {r.status} {r.body[:200]!r}")
        finally:
            client.close()

    await asyncio.gather(*(worker() for _ in range(PUT_CONCURRENCY)))


def _rocksdb_mib(port: int) -> str:
    """RocksDB's memory by kind, as the server reports it."""

    async def read() -> str:
        client = Client(process.HOST, port)
        try:
            text, _ = await gauges.metrics(client)
        finally:
            client.close()
        return ", ".join(
            f"{kind} {gauges.metric(text, ROCKSDB_MEMORY % kind) / 2**20:.0f}"
            for kind in ("memtables", "block_cache")
        )

    return run(read)


def _one(n: int, every_ms: int, read_back: bool) -> tuple[list[float], int, str]:
    """Lateness (ms) of one period's fires (each schedule's once) if ``read_back``, the
    RSS (KiB) and RocksDB's memory by kind at the end of the second period."""
    with (
        tempfile.TemporaryDirectory(prefix="rocktimer-bench-schedules-") as tmp,
        process.service(Path(tmp)) as service,
    ):
        # A schedule put after its start fires first a period later: the window is the
        # second period, which every schedule reaches however long the puts take.
        start = loader.now_ms() + PUT_LEAD_MS + n * 1_000 // PUTS_PER_S_FLOOR
        run(lambda: _put_all(service.port, n, start, every_ms))
        window = (start + every_ms, start + 2 * every_ms)
        end = start + 2 * MINUTE_MS  # both runs: memory after the same two minutes
        with process.Profile(service.pid, f"schedules-{n}"):
            time.sleep(max(0.0, (end - loader.now_ms()) / 1000))
        # After the minute of fires, before the consumer reads them back (its receives
        # and acks of 2N messages are not what is compared).
        rss = process.status_kib(service.pid, "VmRSS")
        rocksdb = _rocksdb_mib(service.port)
        late: list[float] = []
        if not read_back:
            return late, rss, rocksdb

        def on_batch(messages: list[dict[str, Any]], _r: object) -> None:
            for m in messages:
                if window[0] <= m["deliver_at_ms"] < window[1]:
                    late.append(float(m["delivered_at_ms"] - m["deliver_at_ms"]))

        run(
            lambda: consumer.consume(
                process.HOST,
                service.port,
                TOPIC,
                "g",
                expected=2 * n,  # the first minute's fires (up to n), then the window's
                timeout_s=CONSUME_TIMEOUT_S,
                on_batch=on_batch,
            )
        )
    return late, rss, rocksdb


def run_figure(n: int) -> list[report.Row]:
    # Memory is compared at a like fire rate: RocksDB's write buffers fill with the fires'
    # writes, whatever the number of schedules, so 1k schedules firing once a minute (17
    # fires/s) against 100k (1,667/s) would compare write rates, not schedule counts.
    _, small_rss, small_rocksdb = _one(SMALL_N, SMALL_EVERY_MS, read_back=False)
    late, rss, rocksdb = _one(n, MINUTE_MS, read_back=True)
    lateness = spread(late)
    ratio = rss / small_rss if small_rss else 0.0
    return [
        report.Row(
            "13",
            f"{n:,} recurring schedules firing every minute: fire lateness",
            lateness.ms(),
            "-",
            f"p99 {lateness.p99:.1f} ms",
            f"p99 <= {TARGET_P99_MS:.0f} ms",
            lateness.p99 <= TARGET_P99_MS and len(late) == n,
            f"{len(late):,} of {n:,} fires read back",
        ),
        report.Row(
            "13",
            "recurring schedules: server memory after two minutes of fires",
            f"{rss / 1024:,.0f} MiB with {n:,} every minute ({n * 1000 // MINUTE_MS:,} fires/s)",
            f"{small_rss / 1024:,.0f} MiB with {SMALL_N:,} every second "
            f"({SMALL_N * 1000 // SMALL_EVERY_MS:,} fires/s)",
            f"x{ratio:.2f}",
            f"<= x{TARGET_RSS_RATIO}",
            ratio <= TARGET_RSS_RATIO,
            f"RocksDB MiB: {rocksdb} with {n:,}; {small_rocksdb} with {SMALL_N:,}",
        ),
    ]


def size() -> int:
    return int(os.environ.get("BENCH_SCHEDULES_N", DEFAULT_N))


def main() -> None:
    print(report.table(run_figure(size()), "quick"))


if __name__ == "__main__":
    main()
