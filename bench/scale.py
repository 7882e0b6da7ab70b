"""The bench profile: ``quick`` (default, `make bench`) or ``full`` (BENCH_SCALE=full).

Quick keeps `make bench` under ten minutes on the 2-core reference machine; full runs the
sizes the targets are stated for (a one-minute lateness window, a 10M storm, 10M pending
timers and 10M deliveries).

Environment overrides (any profile): BENCH_STORM_N, BENCH_CONSUME_N, BENCH_NACK_N,
BENCH_PENDING_N, BENCH_RECLAIM_N, BENCH_SOAK_MINUTES, BENCH_PIPELINE_N, BENCH_PUSH_N
(integers) and BENCH_GROWTH_LEVELS (comma-separated integers, e.g. ``10000,100000``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Scale:
    name: str
    send_warmup_s: float  # figure 1: connections open, caches warm, before counting
    send_seconds: float  # figure 1: each of the two closed-loop runs
    batches: int  # figures 2 and 6: batch requests of 1000 messages (and ceiling WriteBatches)
    lateness_seconds: float  # figures 3 and 6: how long 5k timers/s keep falling due
    storm_n: int  # figures 4 and 6: timers due at the same instant
    consume_n: int  # figure 5: messages received and acked
    nack_n: int  # figure 5: messages received and nacked (and batch-sent, for the ratio)
    pending_n: int  # figure 7: far-future timers held
    reclaim_n: int  # figure 8: deliveries (one storm) before the scan-cost probe
    growth_levels: tuple[int, ...]  # figure 9: pending timers at each measured point
    ontime_seconds: float  # figure 10: each phase's window (timers due, loads running)
    soak_minutes: int  # figure 15: fake minutes of steady load
    pipeline_n: int  # figure 16: rows bulk-loaded, and events reported and audited
    push_n: int  # figure 17: messages pushed to the webhook receiver (and POSTed directly)
    stream_seconds: float  # figure 18: how long 5k timers/s fall due for one stream
    streams_open: int  # figure 18: streams held open at once
    stream_probes: int  # figure 18: single messages due on one of the open streams
    deliver_seconds: float  # figure 19: each delivery round's window of 5k timers/s
    deliver_rounds: int  # figure 19: rounds (batch, stream, long poll each)


QUICK = Scale(
    name="quick",
    send_warmup_s=2,
    send_seconds=10,
    batches=200,
    lateness_seconds=20,
    storm_n=200_000,
    consume_n=100_000,
    nack_n=50_000,
    pending_n=1_000_000,
    reclaim_n=1_000_000,
    growth_levels=(10_000, 100_000, 1_000_000),
    ontime_seconds=30,
    soak_minutes=60,
    pipeline_n=100_000,
    push_n=50_000,
    stream_seconds=30,
    streams_open=2_000,
    stream_probes=500,
    deliver_seconds=4,
    deliver_rounds=3,
)
FULL = Scale(
    name="full",
    send_warmup_s=5,
    send_seconds=30,
    batches=1_000,
    lateness_seconds=60,
    storm_n=10_000_000,
    consume_n=500_000,
    nack_n=200_000,
    pending_n=10_000_000,
    reclaim_n=10_000_000,
    growth_levels=(10_000, 100_000, 1_000_000, 10_000_000),
    ontime_seconds=60,
    soak_minutes=240,
    pipeline_n=10_000_000,
    push_n=200_000,
    stream_seconds=60,
    streams_open=2_000,
    stream_probes=2_000,
    deliver_seconds=10,
    deliver_rounds=6,
)

_INT_OVERRIDES = {
    "BENCH_STORM_N": "storm_n",
    "BENCH_CONSUME_N": "consume_n",
    "BENCH_NACK_N": "nack_n",
    "BENCH_PENDING_N": "pending_n",
    "BENCH_RECLAIM_N": "reclaim_n",
    "BENCH_SOAK_MINUTES": "soak_minutes",
    "BENCH_PIPELINE_N": "pipeline_n",
    "BENCH_PUSH_N": "push_n",
}


def _positive_int(var: str, text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise SystemExit(f"{var} must be an integer, not {text!r}") from None
    if value <= 0:
        raise SystemExit(f"{var} must be positive, not {value}")
    return value


def current() -> Scale:
    """The profile named by BENCH_SCALE, with the BENCH_* size overrides applied."""
    name = os.environ.get("BENCH_SCALE", "quick").strip().lower() or "quick"
    if name not in ("quick", "full"):
        raise SystemExit(f"BENCH_SCALE must be 'quick' or 'full', not {name!r}")
    scale = FULL if name == "full" else QUICK
    changes: dict[str, object] = {}
    for var, field in _INT_OVERRIDES.items():
        text = os.environ.get(var, "").strip()
        if text:
            changes[field] = _positive_int(var, text)
    levels = os.environ.get("BENCH_GROWTH_LEVELS", "").strip()
    if levels:
        parsed = tuple(
            _positive_int("BENCH_GROWTH_LEVELS", part) for part in levels.split(",") if part
        )
        if list(parsed) != sorted(set(parsed)):
            raise SystemExit("BENCH_GROWTH_LEVELS must be increasing, e.g. 10000,100000")
        changes["growth_levels"] = parsed
    return dataclasses.replace(scale, **changes) if changes else scale  # type: ignore[arg-type]
