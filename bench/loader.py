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


async def send_topics(
    host: str, port: int, bodies: dict[str, list[bytes]], *, deadline_s: float
) -> list[LoadStats]:
    """Each topic's bodies from a connection of its own, every topic at once: how a bulk
    load's requests arrive (pipeline.bulk_load, a batch per topic in flight)."""
    return list(
        await asyncio.gather(
            *(
                send_batches(host, port, topic, iter(batches), concurrency=1, deadline_s=deadline_s)
                for topic, batches in bodies.items()
            )
        )
    )


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


# --- a bulk load's requests (figure 16's loader, without Spark) ------------------------------

BULK_TOPICS = 8
BULK_DUPLICATE_FRACTION = 0.02  # rows that repeat the row before them (pipeline/generate.py)
BULK_BURSTS = 10  # the seconds the burst rows are due in, a minute apart
BULK_TAGS = ("email", "sms", "push")
BULK_LEVELS = 18  # delay levels 1..18 (workers/rules/retry.py)


def bulk_bodies(n: int, *, seed: int, start_ms: int) -> dict[str, list[bytes]]:
    """The batch requests ``pipeline.bulk_load`` sends for ``n`` rows of
    ``pipeline.generate``'s mix, built without Spark: per topic (8, skewed as the
    generator's), batches of ``BATCH_SIZE`` in row order. Every item carries a msg_id
    (80 % the file's own, the rest a content id as the loader makes), half a tag, 30 %
    two properties, 5 % a base64 body; the deliver time: 35 % bursts a minute to ten
    minutes ahead, 20 % a delay under an hour, 10 % a delay level, 35 % months to years
    ahead as deliver_at_ms. 2 % of the rows repeat the row before them (their msg_id
    too: an export that overlaps itself), so a batch has a few resends. The seed names
    the ids: a new seed, new messages."""
    rng = random.Random(seed)
    second = start_ms - start_ms % 1_000
    pending: dict[str, list[dict[str, Any]]] = {}
    bodies: dict[str, list[bytes]] = {}
    item: dict[str, Any] = {}
    topic = ""
    for i in range(n):
        if not (i and rng.random() < BULK_DUPLICATE_FRACTION):
            topic, item = _bulk_row(rng, seed, i, second)
        items = pending.setdefault(topic, [])
        items.append(item)
        if len(items) == BATCH_SIZE:
            bodies.setdefault(topic, []).append(batch_body(items))
            pending[topic] = []
    for name, items in pending.items():
        if items:
            bodies.setdefault(name, []).append(batch_body(items))
    return bodies


def _bulk_row(rng: random.Random, seed: int, i: int, second_ms: int) -> tuple[str, dict[str, Any]]:
    u = rng.random
    topic = f"topic-{int(u() * u() * BULK_TOPICS)}"
    text = f'{{"customer": {i % 100_003}, "template": "reminder-{i % 17}"}}'
    item: dict[str, Any] = {}
    if u() < 0.8:
        item["msg_id"] = f"order-{seed}-{i}"
    else:
        item["msg_id"] = f"bl-{rng.getrandbits(128):032x}"
    if u() < 0.05:
        item["body"] = base64.b64encode(text.encode()).decode()
        item["body_encoding"] = "base64"
    else:
        item["body"] = text
    if u() < 0.3:
        item["properties"] = {"source": "import", "campaign": f"c{i % 7}"}
    if u() < 0.5:
        item["tag"] = BULK_TAGS[rng.randrange(len(BULK_TAGS))]
    p = u()
    if p < 0.35:
        burst = 60_000 * rng.randint(1, BULK_BURSTS)
        item["deliver_at_ms"] = second_ms + burst + rng.randrange(1_000)
    elif p < 0.55:
        item["delay_ms"] = rng.randrange(3_600_000)
    elif p < 0.65:
        item["delay_level"] = rng.randint(1, BULK_LEVELS)
    else:
        item["deliver_at_ms"] = second_ms + 30 * DAY_MS + rng.randrange(1_800 * DAY_MS)
    return topic, item
