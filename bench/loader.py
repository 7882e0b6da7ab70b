"""Batch sends over HTTP: the loader of figures 2-4 (1000 messages a request)."""

from __future__ import annotations

import asyncio
import base64
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench.client import Connection, HttpError, build_request

BATCH_SIZE = 1_000  # api.md's maximum items per batch request
BATCH_CONCURRENCY = 2  # one request is parsed while the other waits for its fsync; 1, 2, 4
# and 8 measured within 5% of each other on the reference machine (the server is CPU bound)
BATCH_TIMEOUT_S = 60.0  # one batch request; a healthy one takes milliseconds


@dataclass(slots=True)
class LoadStats:
    requests: int = 0
    stored: int = 0  # items answered 201
    failed: Counter[int] = field(default_factory=Counter)  # status -> items (or requests)
    refused: int = 0  # requests answered 429 and sent again
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.stored / self.seconds if self.seconds > 0 else 0.0

    def describe_failures(self) -> str:
        return ", ".join(f"{n} x {status}" for status, n in sorted(self.failed.items()))


def batch_body(messages: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"messages": messages})


async def send_batches(
    host: str,
    port: int,
    topic: str,
    bodies: Iterator[bytes],
    *,
    concurrency: int = BATCH_CONCURRENCY,
    timeout_s: float = BATCH_TIMEOUT_S,
    deadline_s: float,
) -> LoadStats:
    """POST every body to the batch route from ``concurrency`` keep-alive connections.

    Stops at the end of ``bodies`` or ``deadline_s`` seconds, whichever comes first. A 429
    (deliveries lag: a storm falling due while a slow machine still loads it) is sent
    again after its Retry-After, as a producer backs off.
    """
    authority = f"{host}:{port}"
    path = f"/v1/topics/{topic}/messages/batch"
    stats = LoadStats()
    started = time.monotonic()
    stop_at = started + deadline_s

    async def worker() -> None:
        conn = await Connection.open(host, port)
        try:
            for body in bodies:
                request = build_request("POST", authority, path, body)
                response = await conn.request(request, timeout_s)
                while response.status == 429 and time.monotonic() < stop_at:
                    stats.refused += 1
                    await asyncio.sleep(response.retry_after_s)
                    response = await conn.request(request, timeout_s)
                stats.requests += 1
                if response.status != 200:
                    stats.failed[response.status] += 1
                    raise HttpError(f"batch send: {response.status} {response.body[:300]!r}")
                for item in response.json()["results"]:
                    if item["status"] == 201:
                        stats.stored += 1
                    else:
                        stats.failed[item["status"]] += 1
                if time.monotonic() >= stop_at:
                    return
        finally:
            conn.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    stats.seconds = time.monotonic() - started
    return stats


# Scheduling ahead: the deliver times of a load are fixed before it starts, so the first
# must lie beyond the end of the load. Plan for half the batch rate figure 2 measures on
# the reference machine (~55k msg/s), plus a margin for the consumer to be polling.
LOAD_RATE_FLOOR = 25_000  # msg/s
LEAD_MARGIN_MS = 2_000


def lead_ms(n: int) -> int:
    """How far ahead to schedule the first of ``n`` messages loaded right now."""
    return LEAD_MARGIN_MS + n * 1_000 // LOAD_RATE_FLOOR


def now_ms() -> int:
    """The wall clock in ms, as the server stamps deliver_at_ms and delivered_at_ms."""
    return time.time_ns() // 1_000_000


# --- far-future timers (figures 7 and 9) ----------------------------------------------------

DAY_MS = 86_400_000
FAR_START_MS = DAY_MS  # the nearest far-future timer: a day ahead, never due during a run
FAR_SPAN_MS = 365 * DAY_MS  # spread over a year, in random order (not sorted by due time)
RANDOM_BODY_BYTES = 96  # base64 of 96 random bytes: a 128-character body
RANDOM_BODY_POOL = 1_024  # distinct bodies; RocksDB's 4 KiB blocks hold ~15 timers each


def random_bodies(rng: random.Random, count: int = RANDOM_BODY_POOL) -> list[str]:
    """``count`` 128-character bodies of random base64: LZ4 cannot shrink them."""
    return [base64.b64encode(rng.randbytes(RANDOM_BODY_BYTES)).decode() for _ in range(count)]


def far_future_bodies(n: int, *, seed: int, size: int = BATCH_SIZE) -> Iterator[bytes]:
    """Batch bodies for ``n`` timers due between one day and a year from now, random order.

    Deterministic for a seed; built lazily, so ten million timers never sit in memory.
    Each message: a random 128-character body (from a pool) and a server-made msg_id.
    """
    rng = random.Random(seed)
    bodies = random_bodies(rng)
    start = now_ms() + FAR_START_MS
    for first in range(0, n, size):
        yield batch_body(
            [
                {
                    "body": bodies[rng.randrange(RANDOM_BODY_POOL)],
                    "deliver_at_ms": start + rng.randrange(FAR_SPAN_MS),
                }
                for _ in range(min(size, n - first))
            ]
        )
