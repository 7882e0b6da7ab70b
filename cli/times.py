"""Durations and times as people type and read them; the API speaks int milliseconds."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h|d)?\s*$")


def parse_duration_ms(text: str) -> int:
    """ "500ms", "5s", "10m", "2h", "1d". The unit is required: a bare 5 reads as 5 ms to
    one person and 5 s to the next, so it is refused rather than guessed."""
    found = _DURATION.match(text.lower())
    if not found:
        raise ValueError(f"{text!r} is not a duration (like 500ms, 5s, 10m, 2h, 1d)")
    number, unit = found.groups()
    if unit is None:
        units = "ms, s, m, h or d"
        raise ValueError(f"{number} has no unit: write {number}ms, {number}s, ... ({units})")
    return round(float(number) * _UNITS_MS[unit])


def parse_time_ms(text: str) -> int:
    """Epoch milliseconds, or an ISO 8601 time (without a zone: the local time zone)."""
    if text.strip().isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time (epoch ms, or ISO 8601 like 2030-01-31T09:00:00Z)"
        ) from None
    return round(moment.astimezone(UTC).timestamp() * 1000)


def duration(ms: int) -> str:
    """1234 -> "1.2 s", 90_000 -> "1 min 30 s", 7_200_000 -> "2 h"."""
    ms = abs(ms)
    if ms < 1_000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s".replace(".0 s", " s")
    parts: list[str] = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000)):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count} {unit}")
    return " ".join(parts[:2])


def when(ms: int, now_ms: int) -> str:
    """An absolute UTC time and how far it is from now: "2030-01-31 09:00:00 UTC (in 3 d)"."""
    stamp = datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    delta = ms - now_ms
    if abs(delta) < 1_000:
        return f"{stamp} (now)"
    return f"{stamp} ({'in ' + duration(delta) if delta > 0 else duration(delta) + ' ago'})"
