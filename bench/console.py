"""Figure "console": first paint of every console page with N messages scheduled.

One server, fresh data dir: N far-future timers (figure 7's load, 1M by default,
BENCH_CONSOLE_N) in one topic, plus NEAR messages due within the next hour in the same
topic (so the overview's due-ahead histogram hits its scan bound), one consumer group with a
dead letter. Then headless Chromium (Debian's, as in the console tests) loads each page
LOADS times in a fresh tab and reads the Paint Timing API's first-contentful-paint, and the
time until the page's data is drawn (its table or stat cards). Target: first paint < 300 ms.
The ceiling is the same browser painting a static page of the same server (/ui/static's
index.html with no script): what any page costs here before the console does anything.

    python -m bench.console
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
from pathlib import Path

from bench import loader, report
from bench.client import Client
from tests.support import process

TOPIC = "console"
GROUP = "ops"
NEAR = 30_000  # due within the hour: more than the overview's 20k scan bound
LOADS = 5  # page loads per page; the median is reported
TARGET_FIRST_PAINT_MS = 300.0
SEED = 11
CHROMIUM = os.environ.get("ROCKTIMER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGES = {  # page -> (hash, selector that appears once its data is drawn)
    "overview": ("#/", ".stat"),
    "topics": ("#/topics", "tbody tr"),
    "topic (scheduled, due order)": (f"#/topics/{TOPIC}", "tbody tr"),
    "groups": (f"#/topics/{TOPIC}/groups", "tbody tr"),
    "dead letters": (f"#/topics/{TOPIC}/groups/{GROUP}/dlq", "tbody tr"),
}
PAINT_JS = (
    "performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? "
    "performance.getEntriesByType('paint').at(-1)?.startTime ?? -1"
)


def _near_bodies(n: int) -> list[bytes]:
    start = loader.now_ms() + 60_000
    return [
        loader.batch_body(
            [
                {"body": "due soon", "deliver_at_ms": start + (i * 3_500_000) // n}
                for i in range(first, min(n, first + 1000))
            ]
        )
        for first in range(0, n, 1000)
    ]


async def _prepare(service: process.ServerProcess, n: int) -> None:
    await loader.send_batches(
        process.HOST,
        service.port,
        TOPIC,
        loader.far_future_bodies(n, seed=SEED),
        deadline_s=n / 5_000 + 60,
    )
    await loader.send_batches(
        process.HOST, service.port, TOPIC, iter(_near_bodies(NEAR)), deadline_s=120
    )
    client = Client(process.HOST, service.port, timeout_s=30.0)
    try:
        base = f"/v1/topics/{TOPIC}/groups/{GROUP}"
        await client.call("PUT", base, {"max_attempts": 1})
        await client.call("POST", f"/v1/topics/{TOPIC}/messages", {"msg_id": "dead", "body": "x"})
        got = (await client.call("POST", f"{base}/receive", {"wait_ms": 5000})).json()
        receipts = [m["receipt"] for m in got["messages"]]
        await client.call("POST", f"{base}/nack", {"receipts": receipts})
    finally:
        client.close()


def _measure(url: str) -> dict[str, tuple[float, float]]:
    """page -> (median first paint, median data drawn), in ms."""
    from playwright.sync_api import sync_playwright

    out: dict[str, tuple[float, float]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            pages = {"static page (ceiling)": ("/ui/static/index.html#", "header"), **PAGES}
            for name, (hash_, ready) in pages.items():
                paints, drawn = [], []
                for _ in range(LOADS):
                    page = browser.new_page(viewport={"width": 1280, "height": 800})
                    target = url + hash_ if hash_.startswith("/") else f"{url}/ui{hash_}"
                    page.goto(target, wait_until="commit")
                    page.wait_for_selector(ready, timeout=30_000)
                    drawn.append(page.evaluate("performance.now()"))
                    page.wait_for_function(f"({PAINT_JS}) >= 0", timeout=10_000)
                    paints.append(float(page.evaluate(PAINT_JS)))
                    page.close()
                out[name] = (statistics.median(paints), statistics.median(drawn))
        finally:
            browser.close()
    return out


def run_figure(n: int) -> list[report.Row]:
    with (
        tempfile.TemporaryDirectory(prefix="bench-console-") as tmp,
        process.service(Path(tmp)) as service,
    ):
        asyncio.run(_prepare(service, n))
        process.wait_idle(service.pid, timeout_s=60)
        times = _measure(f"http://{process.HOST}:{service.port}")
    ceiling_paint = times.pop("static page (ceiling)")[0]
    return [
        report.Row(
            "C",
            f"console {name}, {n:,} scheduled",
            f"first paint {paint:.0f} ms; data drawn {drawn:.0f} ms",
            f"static page {ceiling_paint:.0f} ms",
            report.ratio(paint, ceiling_paint),
            f"first paint < {TARGET_FIRST_PAINT_MS:.0f} ms",
            paint < TARGET_FIRST_PAINT_MS,
            f"median of {LOADS} loads, fresh tab each",
        )
        for name, (paint, drawn) in times.items()
    ]


if __name__ == "__main__":
    rows = run_figure(int(os.environ.get("BENCH_CONSOLE_N", "1000000")))
    print(report.table(rows, "console"))
