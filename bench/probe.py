"""The scan-cost probe of figures 8 and 9: a small, spread-out schedule and its lateness.

1000 timers are sent in one batch request, due one per millisecond over the second that
starts one second later. The scanner then runs about one round per millisecond, each
round building an iterator, seeking to its cursor, reading the key(s) now due and seeking
for the next due key: two seeks a timer. Whatever makes a seek slow — tombstones left
behind by millions of deliveries, a larger keyspace — shows in every round, so in the
lateness of every probe timer, while the work per timer (one small move) stays the same.

Lateness is (a) of figure 3: ``delivered_at_ms - deliver_at_ms``, both whole ms stamped by
the server. A stamp of k ms means k <= lateness < k + 1, so the mean is taken at the
middle of each millisecond (k + 0.5): a ratio of means then compares like with like
instead of dividing by a truncated, near-zero number. A long-polling consumer (figure 3's)
reads the probe back once the last timer is due (a consumer's receives and fsynced acks
would otherwise share the writer thread with the moves being timed); every timer must
arrive.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass
from typing import Any

from bench import consumer, loader
from bench.client import Response
from bench.stats import Spread, spread
from tests.support import process

PROBE_N = 1_000
PROBE_SPAN_MS = 1_000  # due one per ms
PROBE_LEAD_MS = 1_000  # the first falls due a second after the send
READ_BACK_AFTER_S = 0.1  # after the last due time, before the read-back starts
GRACE_S = 10.0  # a bound on the read-back (stragglers still arrive by long poll)
GROUP = "probe"
BODY = "p" * 100


@dataclass(frozen=True, slots=True)
class Shape:
    n: int = PROBE_N
    span_ms: int = PROBE_SPAN_MS
    lead_ms: int = PROBE_LEAD_MS


DEFAULT = Shape()


@dataclass(frozen=True, slots=True)
class ProbeResult:
    lateness: Spread  # (a), whole ms as stamped
    mean_ms: float  # mean of (a) taken at mid-millisecond
    received: int
    expected: int

    def describe(self) -> str:
        if not self.lateness.n:
            return "no samples"
        s = self.lateness
        return f"mean {self.mean_ms:.2f} / p99 {s.p99:.0f} / max {s.max:.0f} ms"

    @property
    def complete(self) -> bool:
        return self.received == self.expected


async def probe(port: int, topic: str, shape: Shape = DEFAULT) -> ProbeResult:
    """Send the probe to ``topic`` (fresh: only the probe is in it), receive it back."""
    n, span_ms, lead_ms = shape.n, shape.span_ms, shape.lead_ms
    first = loader.now_ms() + lead_ms
    dues = [first + i * span_ms // n for i in range(n)]
    bodies = (
        loader.batch_body(
            [{"body": BODY, "deliver_at_ms": d} for d in dues[i : i + loader.BATCH_SIZE]]
        )
        for i in range(0, n, loader.BATCH_SIZE)
    )
    load = await loader.send_batches(process.HOST, port, topic, bodies, deadline_s=lead_ms / 1e3)
    if load.stored != n:
        raise RuntimeError(f"probe: stored {load.stored} of {n} ({load.describe_failures()})")
    if loader.now_ms() >= first:
        raise RuntimeError(f"probe: sending took {load.seconds * 1e3:.0f} ms, past the first due")

    late: list[float] = []

    def record(messages: list[dict[str, Any]], _: Response) -> None:
        late.extend(
            m["delivered_at_ms"] - m["deliver_at_ms"] for m in messages if m["attempt"] == 1
        )

    # Read back only once the last one is due: a consumer's receives and acks (fsynced)
    # would share the writer with the moves being measured.
    await asyncio.sleep(max(0.0, (dues[-1] - loader.now_ms()) / 1e3 + READ_BACK_AFTER_S))
    await consumer.consume(
        process.HOST, port, topic, GROUP, expected=n, timeout_s=GRACE_S, on_batch=record
    )
    mean = statistics.fmean(late) + 0.5 if late else float("nan")
    return ProbeResult(spread(late), mean, len(late), n)
