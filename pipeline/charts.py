"""The report a person looks at: three PNG charts (matplotlib, Agg) and report.html.

Numbers are for people: 1.2M, 350 ms, 2.5 min; times are UTC and say so.
"""

from __future__ import annotations

import html
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Lateness histogram bucket edges (ms): bucket i holds edges[i-1] <= lateness < edges[i].
EDGES_MS = (
    1,
    2,
    5,
    10,
    20,
    50,
    100,
    200,
    500,
    1_000,
    2_000,
    5_000,
    10_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    1_800_000,
    3_600_000,
)
CHARTS = (
    ("lateness.png", "How late deliveries were"),
    ("throughput.png", "Throughput over time"),
    ("retries.png", "Retries and dead letters over time"),
)
BLUE, GREEN, GREY, ORANGE, RED = "#2563eb", "#16a34a", "#9ca3af", "#ea580c", "#dc2626"


def human_count(n: float | None) -> str:
    """1234 → '1.2k', 3_400_000 → '3.4M'."""
    if n is None:
        return "–"
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f}".removesuffix(".0") + unit
    return f"{n:.0f}"


def human_ms(ms: float | None) -> str:
    """350 → '350 ms', 1500 → '1.5 s', 150_000 → '2.5 min', 7_200_000 → '2 h'."""
    if ms is None:
        return "–"
    for size, unit in ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1_000, "s")):
        if abs(ms) >= size:
            return f"{ms / size:.1f}".removesuffix(".0") + f" {unit}"
    return f"{ms:.0f} ms"


def bucket_label(i: int) -> str:
    if i == 0:
        return f"< {human_ms(EDGES_MS[0])}"
    if i == len(EDGES_MS):
        return f"≥ {human_ms(EDGES_MS[-1])}"
    low, high = human_ms(EDGES_MS[i - 1]), human_ms(EDGES_MS[i])
    number, unit = low.split(" ")
    return f"{number}–{high}" if high.endswith(f" {unit}") else f"{low}–{high}"


def bucket_expr(F: Any, lateness: Any) -> Any:
    """The histogram bucket of ``lateness`` as a Spark expression (0 .. len(EDGES_MS))."""
    total = F.lit(0)
    for edge in EDGES_MS:
        total = total + F.when(lateness >= edge, 1).otherwise(0)
    return total


def span_text(from_ms: int | None, to_ms: int | None) -> str:
    def at(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    if from_ms is None and to_ms is None:
        return "all sealed events"
    start = "the start" if from_ms is None else at(from_ms)
    return f"{start} to {'the end' if to_ms is None else at(to_ms)}"


def _style(ax: Any, title: str, subtitle: str, ylabel: str) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.set_title(subtitle, fontsize=9, color="#4b5563", loc="left")
    ax.figure.suptitle(title, x=0.065, ha="left", fontsize=13, fontweight="bold")
    ax.set_ylabel(ylabel)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: human_count(v)))
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", color="#e5e7eb")
    ax.set_axisbelow(True)


def _lateness(path: Path, hist: list[tuple[int, int]], overall: dict[str, Any]) -> None:
    import matplotlib.pyplot as plt

    counts = dict(hist)
    last = max(counts, default=0)
    buckets = list(range(last + 1))
    fig, ax = plt.subplots(figsize=(9, 4.2))
    bars = ax.bar(
        [bucket_label(i) for i in buckets],
        [counts.get(i, 0) for i in buckets],
        color=BLUE,
        width=0.8,
    )
    ax.bar_label(
        bars,
        labels=[human_count(counts[i]) if counts.get(i) else "" for i in buckets],
        fontsize=8,
        padding=2,
    )
    n = sum(counts.values())
    subtitle = (
        f"delivered time − due time, {human_count(n)} messages due in the future when sent; "
        f"p50 {human_ms(overall.get('lateness_p50_ms'))}, "
        f"p99 {human_ms(overall.get('lateness_p99_ms'))}, "
        f"max {human_ms(overall.get('lateness_max_ms'))}"
    )
    _style(ax, "How late deliveries were", subtitle, "messages")
    ax.set_xlabel("lateness")
    plt.setp(ax.get_xticklabels(), rotation=40, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _over_time(
    path: Path,
    minutes: dict[int, dict[str, int]],
    series: list[tuple[str, str, str]],
    title: str,
    subtitle: str,
) -> None:
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    xs = sorted(minutes)
    when = [m / 86_400_000 for m in xs]  # matplotlib's date numbers: days since 1970, UTC
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for key, label, color in series:
        ys = [minutes[m].get(key, 0) for m in xs]
        ax.plot(
            when,
            ys,
            label=f"{label} ({human_count(sum(ys))})",
            color=color,
            marker="o" if len(xs) < 30 else None,
            markersize=4,
            linewidth=1.8,
        )
    _style(ax, title, subtitle, "messages per minute")
    ax.set_ylim(bottom=0)
    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    ax.set_xlabel("time (UTC)")
    ax.legend(frameon=False, fontsize=9, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(out: Path, built: dict[str, Any], span: str) -> None:
    """lateness.png, throughput.png, retries.png and report.html into ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    minutes: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in built["tables"]["by_minute"].to_pylist():
        for key in ("scheduled", "delivered", "acked", "retries", "dead", "redriven"):
            minutes[row["minute_ms"]][key] += row[key] or 0
    overall = built["overall"]
    _lateness(out / "lateness.png", built["histogram"], overall)
    _over_time(
        out / "throughput.png",
        minutes,
        [
            ("scheduled", "scheduled", GREY),
            ("delivered", "delivered", BLUE),
            ("acked", "acked", GREEN),
        ],
        "Throughput over time",
        f"all topics, per minute; {span}",
    )
    _over_time(
        out / "retries.png",
        minutes,
        [
            ("retries", "retries (receives after the first)", ORANGE),
            ("dead", "dead letters", RED),
            ("redriven", "redriven", GREEN),
        ],
        "Retries and dead letters over time",
        f"all topics, per minute; {span}",
    )
    (out / "report.html").write_text(_html(built, span))


_COLUMNS = (
    ("topic", "topic", str),
    ("scheduled", "scheduled", human_count),
    ("delivered", "delivered", human_count),
    ("cancelled", "cancelled", human_count),
    ("lateness_p50_ms", "late p50", human_ms),
    ("lateness_p99_ms", "late p99", human_ms),
    ("lateness_max_ms", "late max", human_ms),
    ("ack_p50_ms", "to ack p50", human_ms),
    ("retries", "retries", human_count),
    ("dead", "dead", human_count),
    ("redriven", "redriven", human_count),
)


def _tile(label: str, value: str) -> str:
    return f'<div class="tile"><b>{html.escape(value)}</b><span>{label}</span></div>'


def _html(built: dict[str, Any], span: str) -> str:
    o = built["overall"]
    tiles = [
        ("events", human_count(built["events"])),
        ("delivered", human_count(o.get("delivered"))),
        ("lateness p50", human_ms(o.get("lateness_p50_ms"))),
        ("lateness p99", human_ms(o.get("lateness_p99_ms"))),
        ("lateness max", human_ms(o.get("lateness_max_ms"))),
        ("retries", human_count(o.get("retries"))),
        ("dead letters", human_count(o.get("dead"))),
    ]
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in _COLUMNS)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(fmt(row[key]))}</td>" for key, _, fmt in _COLUMNS)
        + "</tr>"
        for row in built["tables"]["by_topic"].to_pylist()
    )
    made = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rocktimer delivery report</title>
<style>
body {{ font: 15px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 1000px;
       color: #111827; }}
h1 {{ margin-bottom: .2rem; }} .span {{ color: #4b5563; margin-top: 0; }}
.tiles {{ display: flex; flex-wrap: wrap; gap: .8rem; margin: 1.2rem 0; }}
.tile {{ border: 1px solid #e5e7eb; border-radius: 8px; padding: .6rem 1rem; min-width: 7rem; }}
.tile b {{ display: block; font-size: 1.4rem; }} .tile span {{ color: #4b5563; font-size: .85rem; }}
img {{ max-width: 100%; margin: .6rem 0 1.4rem; }}
table {{ border-collapse: collapse; width: 100%; font-size: .9rem; }}
th, td {{ padding: .35rem .6rem; border-bottom: 1px solid #e5e7eb; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
</style></head><body>
<h1>rocktimer delivery report</h1>
<p class="span">{html.escape(span)} · made {made}</p>
<div class="tiles">{"".join(_tile(k, v) for k, v in tiles)}</div>
{"".join(f'<h2>{title}</h2><img src="{name}" alt="{title}">' for name, title in CHARTS)}
<h2>Per topic</h2>
<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
<p>Lateness counts messages that were due in the future when sent. Tables:
by_topic, by_minute, by_attempt (.csv and .parquet, next to this file).</p>
</body></html>
"""
