"""The bench profile: ``quick`` (default, `make bench`) or ``full`` (BENCH_SCALE=full).

Quick keeps `make bench` well under ten minutes on the 2-core reference machine; full
runs the sizes the targets are stated for (a one-minute lateness window, a 1M storm).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Scale:
    name: str
    send_warmup_s: float  # figure 1: connections open, caches warm, before counting
    send_seconds: float  # figure 1: each of the two closed-loop runs
    batches: int  # figure 2: batch requests of 1000 messages (and ceiling WriteBatches)
    lateness_seconds: float  # figure 3: how long 5k timers/s keep falling due
    storm_n: int  # figure 4: timers due at the same instant


QUICK = Scale(
    name="quick",
    send_warmup_s=2,
    send_seconds=10,
    batches=200,
    lateness_seconds=20,
    storm_n=200_000,
)
FULL = Scale(
    name="full",
    send_warmup_s=5,
    send_seconds=30,
    batches=1_000,
    lateness_seconds=60,
    storm_n=1_000_000,
)


def current() -> Scale:
    """The profile named by BENCH_SCALE; BENCH_STORM_N overrides the storm size."""
    name = os.environ.get("BENCH_SCALE", "quick").strip().lower() or "quick"
    if name not in ("quick", "full"):
        raise SystemExit(f"BENCH_SCALE must be 'quick' or 'full', not {name!r}")
    scale = FULL if name == "full" else QUICK
    storm_n = os.environ.get("BENCH_STORM_N")
    if storm_n:
        scale = Scale(
            scale.name,
            scale.send_warmup_s,
            scale.send_seconds,
            scale.batches,
            scale.lateness_seconds,
            int(storm_n),
        )
    return scale
