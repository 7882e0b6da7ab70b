"""Figure 13: recurring schedules at scale — fire lateness and memory.

N schedules (quick 100k, BENCH_SCHEDULES_N overrides) firing every minute
(``every_ms`` 60000), their phases spread evenly over the minute (``start_at_ms``), are
put over HTTP. Every schedule fires once in each minute; the fires of the second minute
after the start are read back by a consumer: lateness = delivered_at_ms - deliver_at_ms
(the fire time), p99 reported. The server's VmRSS at the end of that minute (before the
consumer reads it back) is compared with the same run on 1k schedules: the schedules live
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
from typing import Any

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
CONSUME_TIMEOUT_S = 300.0
PUT_LEAD_MS = 5_000  # the first phase starts this long after the puts begin, plus:
PUTS_PER_S_FLOOR = 1_000  # puts per second assumed for the lead (a slower load still works)


async def _put_all(port: int, n: int, start_ms: int) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def worker() -> None:
        client = Client(process.HOST, port)
        try:
            while not queue.empty():
                i = queue.get_nowait()
                phase = start_ms + i * MINUTE_MS // n
                body = {"every_ms": MINUTE_MS, "start_at_ms": phase, "body": "tick"}
                r = await client.call("PUT", f"/v1/topics/{TOPIC}/schedules/s{i:07d}", body)
                if r.status not in (200, 201):
                    raise RuntimeError(f"put schedule: {r.status} {r.body[:200]!r}")
        finally:
            client.close()

    await asyncio.gather(*(worker() for _ in range(PUT_CONCURRENCY)))


def _one(n: int) -> tuple[list[float], int]:
    """Lateness (ms) of one minute's fires (each schedule's once), and the RSS (KiB)."""
    with (
        tempfile.TemporaryDirectory(prefix="rocktimer-bench-schedules-") as tmp,
        process.service(Path(tmp)) as service,
    ):
        # A schedule put after its start fires first a minute later: the window is the
        # second minute, which every schedule reaches however long the puts take.
        start = loader.now_ms() + PUT_LEAD_MS + n * 1_000 // PUTS_PER_S_FLOOR
        run(lambda: _put_all(service.port, n, start))
        window = (start + MINUTE_MS, start + 2 * MINUTE_MS)
        with process.Profile(service.pid, f"schedules-{n}"):
            time.sleep(max(0.0, (window[1] - loader.now_ms()) / 1000))
        # After the minute of fires, before the consumer reads them back (its receives
        # and acks of 2N messages are not what is compared).
        rss = process.status_kib(service.pid, "VmRSS")
        late: list[float] = []

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
    return late, rss


def run_figure(n: int) -> list[report.Row]:
    _, small_rss = _one(SMALL_N)
    late, rss = _one(n)
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
