"""Figure 14: receive with a tag filter that matches 1 % vs unfiltered receive, in
messages delivered per second, same server, same run.

N messages (quick 100k, BENCH_FILTER_N overrides), one in a hundred tagged ``A``, the
rest ``B``, are loaded due now. Group ``all`` (filter ``*``) then reads and acks all N;
group ``a`` (filter ``A``) reads and acks its N/100, passing over the rest. Both with the
long-polling consumer of figure 5. Target: filtered >= 0.5 x unfiltered.

    python -m bench.filtered
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench import consumer, loader, report
from bench.client import Client, run
from tests.support import process

TOPIC = "tagged"
ONE_IN = 100
TARGET_RATIO = 0.5
DEFAULT_N = 100_000
CONSUME_TIMEOUT_S = 600.0


async def _load(port: int, n: int) -> None:
    messages = [
        {"body": "x", "tag": "A" if i % ONE_IN == 0 else "B"} for i in range(loader.BATCH_SIZE)
    ]
    body = loader.batch_body(messages)
    bodies = (body for _ in range(n // loader.BATCH_SIZE))
    load = await loader.send_batches(process.HOST, port, TOPIC, bodies, deadline_s=600)
    if load.stored != n // loader.BATCH_SIZE * loader.BATCH_SIZE:
        raise RuntimeError(f"loaded {load.stored} of {n}")
    client = Client(process.HOST, port)
    try:
        for group, expression in (("all", "*"), ("a", "A")):
            r = await client.call(
                "PUT", f"/v1/topics/{TOPIC}/groups/{group}", {"filter": expression}
            )
            if r.status != 200:
                raise RuntimeError(f"group settings: {r.status}")
    finally:
        client.close()


def _rate(port: int, group: str, expected: int) -> float:
    stats = run(
        lambda: consumer.consume(
            process.HOST,
            port,
            TOPIC,
            group,
            expected=expected,
            timeout_s=CONSUME_TIMEOUT_S,
            on_batch=lambda _m, _r: None,
        )
    )
    if stats.received < expected:
        raise RuntimeError(f"group {group} received {stats.received} of {expected}")
    return stats.received / stats.seconds


def run_figure(n: int) -> list[report.Row]:
    n = n // loader.BATCH_SIZE * loader.BATCH_SIZE
    with (
        tempfile.TemporaryDirectory(prefix="rocktimer-bench-filtered-") as tmp,
        process.service(Path(tmp)) as service,
    ):
        run(lambda: _load(service.port, n))
        unfiltered = _rate(service.port, "all", n)
        filtered = _rate(service.port, "a", n // ONE_IN)
    ratio = filtered / unfiltered if unfiltered else 0.0
    return [
        report.Row(
            "14",
            f"receive with a filter matching 1 % of {n:,} messages",
            f"{filtered:,.0f} msg/s",
            f"unfiltered receive {unfiltered:,.0f} msg/s",
            f"{ratio:.2f}",
            f">= {TARGET_RATIO}",
            ratio >= TARGET_RATIO,
            "messages delivered (and acked) per second, long-polling consumer of figure 5",
        )
    ]


def size() -> int:
    return int(os.environ.get("BENCH_FILTER_N", DEFAULT_N))


def main() -> None:
    print(report.table(run_figure(size()), "quick"))


if __name__ == "__main__":
    main()
