"""A synthetic event log of a realistic day (pipeline.md §1 schema), for the report and
audit benchmarks and for looking at charts: written straight with pyarrow, vectorised, so
10M events take seconds, not a service run of hours.

Per message: scheduled; 2 % cancelled; the rest delivered (lateness log-normal, median
~20 ms, a long tail), received by group ``g``, 90 % acked at once, 10 % nacked and
received again (attempt 2), of which a tenth go to the DLQ (dead), and half of those are
redriven. About 4.2 events per message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from storage.event_table import SEGMENT_SCHEMA

SEGMENT_EVENTS = 1_000_000  # events per Parquet segment, as the exporter seals them
EVENTS_PER_MESSAGE = 4.17


def _messages(rng: np.random.Generator, first: int, n: int, start_ms: int, span_ms: int) -> Any:
    """The events of messages ``first .. first + n - 1``, in time order, without seq."""
    created = start_ms + rng.integers(0, span_ms, n)
    due = created + rng.integers(1_000, 600_000, n)
    late = np.minimum(rng.lognormal(3.0, 1.2, n).astype(np.int64), 3_600_000)
    delivered = due + late
    topic = pa.array(
        np.array(["orders", "reminders", "billing", "campaign"])[rng.integers(0, 4, n)]
    )
    ids = pa.array(np.char.add("m-", np.arange(first, first + n).astype(str)))
    cancelled = rng.random(n) < 0.02
    nacked = (rng.random(n) < 0.10) & ~cancelled
    dead = nacked & (rng.random(n) < 0.10)
    redriven = dead & (rng.random(n) < 0.5)
    ok = ~cancelled
    received = delivered + rng.integers(1, 200, n)
    retry = received + 30_000 + rng.integers(0, 5_000, n)

    def part(
        kind: str,
        mask: Any,
        at: Any,
        group: bool = False,
        attempt: int | None = None,
        with_due: bool = True,
    ) -> Any:
        m, where = int(mask.sum()), pa.array(mask)
        return pa.table(
            {
                "event_time_ms": pa.array(at[mask]),
                "kind": pa.repeat(pa.scalar(kind), m),
                "topic": topic.filter(where),
                "msg_id": ids.filter(where),
                "group": pa.repeat(pa.scalar("g" if group else None, pa.string()), m),
                "attempt": pa.repeat(pa.scalar(attempt, pa.int32()), m),
                "deliver_at_ms": pa.array(due[mask]) if with_due else pa.nulls(m, pa.int64()),
                "created_at_ms": pa.array(created[mask]),
                "tag": pa.nulls(m, pa.string()),
            }
        )

    everyone = np.ones(n, dtype=bool)
    return pa.concat_tables(
        [
            part("scheduled", everyone, created),
            part("cancelled", cancelled, created + (due - created) // 2, with_due=False),
            part("delivered", ok, delivered),
            part("received", ok, received, group=True, attempt=1),
            part("acked", ok & ~nacked, received + rng.integers(1, 50, n), group=True, attempt=1),
            part("nacked", nacked, received + 5, group=True, attempt=1),
            part("received", nacked, retry, group=True, attempt=2),
            part("acked", nacked & ~dead, retry + 20, group=True, attempt=2),
            part("dead", dead, retry + 10, group=True, attempt=2),
            part("redriven", redriven, retry + 60_000, group=True, attempt=2),
        ]
    ).sort_by("event_time_ms")


def write(
    directory: Path,
    events: int,
    start_ms: int = 1_790_000_000_000,
    span_ms: int = 3_600_000,
    seed: int = 7,
) -> int:
    """About ``events`` events in segments under ``directory``; returns how many."""
    rng = np.random.default_rng(seed)
    messages = max(1, int(events / EVENTS_PER_MESSAGE))
    per_segment = max(1, int(SEGMENT_EVENTS / EVENTS_PER_MESSAGE))
    seq = 0
    out = directory / "date=2026-09-21"
    out.mkdir(parents=True, exist_ok=True)
    for first in range(0, messages, per_segment):
        n = min(per_segment, messages - first)
        events_ = _messages(rng, first, n, start_ms, span_ms)
        count = events_.num_rows
        seqs = pa.array(np.arange(seq + 1, seq + count + 1, dtype=np.int64))
        parts = pa.array(np.zeros(count, dtype=np.int32))  # one partition's, as one process's
        table = events_.add_column(0, "seq", seqs).append_column("partition", parts)
        table = table.select(SEGMENT_SCHEMA.names).cast(SEGMENT_SCHEMA)
        pq.write_table(table, out / f"part-{seq + 1}-{seq + count}.parquet", compression="zstd")
        seq += count
    return seq
