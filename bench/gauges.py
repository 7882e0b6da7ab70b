"""Reading the service's /metrics (Prometheus text) from the bench client."""

from __future__ import annotations

import asyncio

from bench.client import Client, HttpError, Response

PENDING = "rocktimer_pending_timers"
DELIVERED = "rocktimer_delivered_timers_total"


def metric(text: str, name: str) -> float:
    """The value of an unlabelled sample in Prometheus text."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise HttpError(f"metric {name} not in /metrics")


async def metrics(client: Client) -> tuple[str, Response]:
    r = await client.call("GET", "/metrics")
    if r.status != 200:
        raise HttpError(f"/metrics: {r.status}")
    return r.body.decode(), r


async def read(client: Client, name: str) -> float:
    text, _ = await metrics(client)
    return metric(text, name)


async def wait_pending_zero(client: Client, *, poll_s: float, timeout_s: float) -> Response:
    """Poll until ``rocktimer_pending_timers`` reads 0; the reply that said so."""
    for _ in range(max(1, int(timeout_s / poll_s))):
        text, r = await metrics(client)
        if metric(text, PENDING) == 0:
            return r
        await asyncio.sleep(poll_s)
    raise RuntimeError(f"pending timers not drained in {timeout_s:.0f} s")
