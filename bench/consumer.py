"""A long-polling consumer over HTTP: receive up to 1000, hand the receipts to an acker.

Acks go out on their own connection from a bounded queue, so the next receive does not
wait for the previous ack's fsync; a full queue (the acker behind) slows receiving down.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.client import Client, HttpError, Response

RECEIVE_WAIT_MS = 1_000  # long poll: answer at the first message, or empty after 1 s
RECEIVE_MAX = 1_000  # api.md's maximum per receive
ACK_QUEUE_BATCHES = 8  # received batches waiting for their ack; full = receiving waits
HTTP_TIMEOUT_S = 30.0  # one receive or ack: the long poll plus plenty of slack

OnBatch = Callable[[list[dict[str, Any]], Response], None]


@dataclass(slots=True)
class ConsumeStats:
    received: int = 0  # messages, redeliveries included
    redelivered: int = 0  # attempt > 1
    receives: int = 0  # receive calls
    acked: int = 0
    ack_other: Counter[str] = field(default_factory=Counter)  # expired / unknown receipts
    seconds: float = 0.0


async def consume(
    host: str,
    port: int,
    topic: str,
    group: str,
    *,
    expected: int,
    timeout_s: float,
    on_batch: OnBatch,
) -> ConsumeStats:
    """Receive until ``expected`` messages arrived or ``timeout_s`` passed; ack everything."""
    stats = ConsumeStats()
    base = f"/v1/topics/{topic}/groups/{group}"
    receive_body = {"max_messages": RECEIVE_MAX, "wait_ms": RECEIVE_WAIT_MS}
    receipts: asyncio.Queue[list[str] | None] = asyncio.Queue(maxsize=ACK_QUEUE_BATCHES)
    receiver = Client(host, port, HTTP_TIMEOUT_S)
    acker = Client(host, port, HTTP_TIMEOUT_S)

    async def ack_all() -> None:
        while (batch := await receipts.get()) is not None:
            r = await acker.call("POST", f"{base}/ack", {"receipts": batch})
            if r.status != 200:
                raise HttpError(f"ack: {r.status} {r.body[:300]!r}")
            for result in r.json()["results"]:
                if result["status"] == "acked":
                    stats.acked += 1
                else:
                    stats.ack_other[result["status"]] += 1

    started = time.monotonic()
    deadline = started + timeout_s
    ack_task = asyncio.create_task(ack_all())
    try:
        while stats.received < expected and time.monotonic() < deadline:
            r = await receiver.call("POST", f"{base}/receive", receive_body)
            stats.receives += 1
            if r.status != 200:
                raise HttpError(f"receive: {r.status} {r.body[:300]!r}")
            messages: list[dict[str, Any]] = r.json()["messages"]
            if not messages:
                continue
            stats.received += len(messages)
            stats.redelivered += sum(1 for m in messages if m["attempt"] > 1)
            on_batch(messages, r)
            await _hand_over(receipts, [m["receipt"] for m in messages], ack_task)
        await _hand_over(receipts, None, ack_task)
        await ack_task
    finally:
        ack_task.cancel()
        receiver.close()
        acker.close()
    stats.seconds = time.monotonic() - started
    return stats


async def _hand_over(
    queue: asyncio.Queue[list[str] | None], item: list[str] | None, acker: asyncio.Task[None]
) -> None:
    """Queue receipts for the acker; re-raise its error instead of waiting on a dead acker."""
    if acker.done():
        await acker
    await asyncio.wait_for(queue.put(item), timeout=HTTP_TIMEOUT_S)
