"""Figure 13: recurring schedules at scale — fire lateness and memory.

N schedules (quick 100k, BENCH_SCHEDULES_N overrides) with cron ``* * * * *`` are put
over HTTP; at the next whole minute all N fire. A consumer reads the fired messages:
lateness = delivered_at_ms - deliver_at_ms (the fire time), p99 reported. The server's
VmRSS after the fire is compared with the same run on 1k schedules: the schedules live
in RocksDB, not in memory, so the two should match. Targets: p99 <= 10 ms, RSS(N) <=
1.25 x RSS(1k).

    python -m bench.schedules
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

from bench import consumer, loader, process, report
from bench.client import Client, run
from bench.stats import spread

TOPIC = "cron"
SMALL_N = 1_000
DEFAULT_N = 100_000
PUT_CONCURRENCY = 64
TARGET_P99_MS = 10.0
TARGET_RSS_RATIO = 1.25
MINUTE_MS = 60_000


async def _put_all(port: int, n: int) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def worker() -> None:
        client = Client(process.HOST, port)
        try:
            while not queue.empty():
                i = queue.get_nowait()
                body = {"cron": "* * * * *", "body": "tick"}
                r = await client.call("PUT", f"/v1/topics/{TOPIC}/schedules/s{i:07d}", body)
                if r.status not in (200, 201):
                    raise RuntimeError(f"put schedule: {r.status} {r.body[:200]!r}")
        finally:
            client.close()

    await asyncio.gather(*(worker() for _ in range(PUT_CONCURRENCY)))


def _one(n: int) -> tuple[list[float], int]:
    """Lateness (ms) of the first whole minute's fires, and the RSS (KiB) after them."""
    with (
        tempfile.TemporaryDirectory(prefix="rocktimer-bench-schedules-") as tmp,
        process.service(Path(tmp)) as service,
    ):
        run(lambda: _put_all(service.port, n))
        # The first fire every schedule has in common: the next whole minute.
        now = loader.now_ms()
        fire_at = (now // MINUTE_MS + 1) * MINUTE_MS
        time.sleep(max(0.0, (fire_at - now) / 1000))
        late: list[float] = []

        def on_batch(messages: list[dict[str, object]], _r: object) -> None:
            for m in messages:
                if m["deliver_at_ms"] == fire_at:
                    late.append(float(m["delivered_at_ms"]) - fire_at)  # type: ignore[arg-type]

        run(
            lambda: consumer.consume(
                process.HOST,
                service.port,
                TOPIC,
                "g",
                expected=n,
                timeout_s=300,
                on_batch=on_batch,
            )
        )
        rss = process.status_kib(service.pid, "VmRSS")
    return late, rss


def run_figure(n: int) -> list[report.Row]:
    _, small_rss = _one(SMALL_N)
    late, rss = _one(n)
    lateness = spread(late)
    ratio = rss / small_rss if small_rss else 0.0
    return [
        report.Row(
            "13",
            f"{n:,} recurring schedules firing at one minute: fire lateness",
            lateness.ms(),
            "-",
            f"p99 {lateness.p99:.1f} ms",
            f"p99 <= {TARGET_P99_MS:.0f} ms",
            lateness.p99 <= TARGET_P99_MS and len(late) == n,
            f"{len(late):,} of {n:,} fires read back",
        ),
        report.Row(
            "13",
            "recurring schedules: server memory after the fire",
            f"{rss / 1024:,.0f} MiB with {n:,}",
            f"{small_rss / 1024:,.0f} MiB with {SMALL_N:,}",
            f"x{ratio:.2f}",
            f"<= x{TARGET_RSS_RATIO}",
            ratio <= TARGET_RSS_RATIO,
        ),
    ]


def size() -> int:
    return int(os.environ.get("BENCH_SCHEDULES_N", DEFAULT_N))


def main() -> None:
    print(report.table(run_figure(size()), "quick"))


if __name__ == "__main__":
    main()
