"""The report a person looks at: three PNG charts (matplotlib, Agg) and report.html.

Numbers are for people: 1.2M, 350 ms, 2.5 min; times are UTC and say so.
"""

from __future__ import annotations

import html
import io
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any, BinaryIO, NamedTuple

# Lateness histogram bucket edges (ms): bucket i holds edges[i-1] <= lateness < edges[i];
# bucket 0 is 0 <= lateness < 1 ms and EARLY (-1) a delivery before its due time, a
# broken promise that must not look like a perfect one.
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
EARLY = -1
MINUTE_MS = 60_000
BLUE, GREEN, GREY, ORANGE, RED = "#2563eb", "#16a34a", "#9ca3af", "#ea580c", "#dc2626"
PARTIAL = "#fef3c7"  # the band behind a partial minute (amber: "not a whole minute")


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
    if i == EARLY:
        return "early"
    if i == 0:
        return f"0–{human_ms(EDGES_MS[0])}"
    if i == len(EDGES_MS):
        return f"≥ {human_ms(EDGES_MS[-1])}"
    low, high = human_ms(EDGES_MS[i - 1]), human_ms(EDGES_MS[i])
    number, unit = low.split(" ")
    return f"{number}–{high}" if high.endswith(f" {unit}") else f"{low}–{high}"


def bucket_expr(F: Any, lateness: Any) -> Any:
    """The histogram bucket of ``lateness`` as a Spark expression (EARLY, 0 .. len(EDGES_MS))."""
    total = F.lit(0)
    for edge in EDGES_MS:
        total = total + F.when(lateness >= edge, 1).otherwise(0)
    return F.when(lateness < 0, F.lit(EARLY)).otherwise(total)


def span_text(from_ms: int | None, to_ms: int | None) -> str:
    def at(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    if from_ms is None and to_ms is None:
        return "all sealed events"
    start = "the start" if from_ms is None else at(from_ms)
    return f"{start} to {'the end' if to_ms is None else at(to_ms)}"


def _style(ax: Any, title: str, subtitle: str, ylabel: str) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax.set_title(subtitle, fontsize=9, color="#4b5563", loc="left")
    ax.figure.suptitle(title, x=0.065, ha="left", fontsize=13, fontweight="bold")
    ax.set_ylabel(ylabel)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no ticks at 0.2
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: human_count(v)))
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", color="#e5e7eb")
    ax.set_axisbelow(True)


def _lateness(path: BinaryIO, hist: list[tuple[int, int]], overall: dict[str, Any]) -> None:
    import matplotlib.pyplot as plt

    counts = dict(hist)
    last = max(counts, default=0)
    buckets = [EARLY, *range(last + 1)]  # early always shown: an empty bar says "none"
    fig, ax = plt.subplots(figsize=(9, 4.2))
    bars = ax.bar(
        [bucket_label(i) for i in buckets],
        [counts.get(i, 0) for i in buckets],
        color=[RED if i == EARLY else BLUE for i in buckets],
        width=0.8,
    )
    ax.bar_label(
        bars,
        labels=[
            human_count(counts.get(i, 0)) if counts.get(i) or i == EARLY else "" for i in buckets
        ],
        fontsize=8,
        padding=2,
    )
    n = sum(counts.values())
    subtitle = (
        f"delivered time − due time, {human_count(n)} messages due in the future when sent, "
        f"{human_count(counts.get(EARLY, 0))} early; "
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


def partial_minutes(
    first_ms: int, last_ms: int, start_ms: int | None, end_ms: int | None
) -> set[int]:
    """The minutes the report covers only in part: those the span [start, end) does not
    cover whole. Without --from-ms/--to-ms the span is the first to the last event."""
    start = first_ms if start_ms is None else start_ms
    end = last_ms + 1 if end_ms is None else end_ms
    first_minute, last_minute = start - start % MINUTE_MS, (end - 1) - (end - 1) % MINUTE_MS
    return {m for m in (first_minute, last_minute) if m < start or m + MINUTE_MS > end}


def _over_time(
    path: BinaryIO,
    minutes: dict[int, dict[str, int]],
    axis: Axis,
    series: list[tuple[str, str, str]],
    title: str,
    subtitle: str,
) -> None:
    import matplotlib.pyplot as plt

    fig = over_time_figure(minutes, axis, series, title, subtitle)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def over_time_figure(
    minutes: dict[int, dict[str, int]],
    axis: Axis,
    series: list[tuple[str, str, str]],
    title: str,
    subtitle: str,
) -> Any:
    """One line per series, a point per minute; every over-time chart gets the same
    x range and plot area (``axis``) so their minutes line up one above the other."""
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    xs = list(range(axis.first, axis.last + MINUTE_MS, MINUTE_MS))
    when = [_date(m) for m in xs]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    fig.subplots_adjust(left=0.08, right=0.70, top=0.84, bottom=0.14)
    for m in sorted(axis.partial):
        ax.axvspan(_date(m), _date(m + MINUTE_MS), color=PARTIAL, zorder=0)
    highest = 0
    for key, label, color in series:
        ys = [minutes.get(m, {}).get(key, 0) for m in xs]
        highest = max(highest, *ys)
        ax.plot(
            when,
            ys,
            label=f"{label} ({human_count(sum(ys))})",
            color=color,
            marker="o" if len(xs) < 30 else None,
            markersize=4,
            linewidth=1.8,
        )
        hollow = [(x, y) for m, x, y in zip(xs, when, ys, strict=True) if m in axis.partial]
        if hollow:  # a partial minute's count is not a per-minute rate: drawn hollow
            ax.plot(
                *zip(*hollow, strict=True),
                linestyle="none",
                marker="o",
                markersize=7,
                markerfacecolor="white",
                markeredgecolor=color,
            )
    if axis.partial:
        ax.plot(
            [],
            [],
            linestyle="none",
            marker="s",
            markersize=9,
            color=PARTIAL,
            label="partial minute (hollow points)",
        )
    _style(ax, title, subtitle, "messages per minute")
    # All zeros (no retries at all) would leave matplotlib a range of ±0.05: ticks
    # that all read "0". The axis then runs to 1.
    ax.set_ylim(bottom=0, top=None if highest else 1)
    ax.set_xlim(_date(axis.first), _date(axis.last + MINUTE_MS))
    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    ax.set_xlabel("time (UTC)")
    ax.legend(frameon=False, fontsize=9, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _axis(
    minutes: dict[int, Any], overall: dict[str, Any], span: tuple[int | None, int | None]
) -> Axis:
    first_ms, last_ms = overall.get("first_ms"), overall.get("last_ms")
    if not minutes or first_ms is None or last_ms is None:
        return Axis(0, 0, set())
    return Axis(min(minutes), max(minutes), partial_minutes(first_ms, last_ms, *span))


class Axis(NamedTuple):
    """The minutes every over-time chart spans, and those covered only in part."""

    first: int
    last: int
    partial: set[int]


def _date(ms: int) -> float:
    return ms / 86_400_000  # matplotlib's date numbers: days since 1970, UTC


def load() -> None:
    """Import matplotlib (Agg) ahead of ``render``: most of a second of the driver's CPU,
    spent on a thread of its own while the driver only waits for the JVM. Without
    matplotlib it does nothing: ``render``'s own import says what is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.dates
        import matplotlib.pyplot
        import matplotlib.ticker
    except ImportError:
        return


def render(built: dict[str, Any], span: str) -> dict[str, bytes]:
    """lateness.png, throughput.png, retries.png and report.html, by name (the job writes
    them where --out says, through Spark's file system)."""
    import matplotlib

    matplotlib.use("Agg")
    minutes: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in built["tables"]["by_minute"].to_pylist():
        for key in ("scheduled", "delivered", "acked", "retries", "dead", "redriven"):
            minutes[row["minute_ms"]][key] += row[key] or 0
    overall = built["overall"]
    files = {name: io.BytesIO() for name, _ in CHARTS}
    _lateness(files["lateness.png"], built["histogram"], overall)
    axis = _axis(minutes, overall, built.get("range", (None, None)))
    _over_time(
        files["throughput.png"],
        minutes,
        axis,
        [
            ("scheduled", "scheduled", GREY),
            ("delivered", "delivered", BLUE),
            ("acked", "acked", GREEN),
        ],
        "Throughput over time",
        f"all topics, per minute; {span}",
    )
    _over_time(
        files["retries.png"],
        minutes,
        axis,
        [
            ("retries", "retries", ORANGE),
            ("dead", "dead letters", RED),
            ("redriven", "redriven", GREEN),
        ],
        "Retries and dead letters over time",
        f"all topics, per minute (retries: receives after the first); {span}",
    )
    pages = {name: f.getvalue() for name, f in files.items()}
    return {**pages, "report.html": _html(built, span).encode()}


def _cell(column: str, value: Any) -> str:
    """A by_topic value for people: durations (``*_ms``) as 350 ms / 1.5 s, counts as 1.2k."""
    if column == "topic":
        return str(value)
    return human_ms(value) if column.endswith("_ms") else human_count(value)


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
        ("early", human_count(o.get("early"))),
        ("retries", human_count(o.get("retries"))),
        ("dead letters", human_count(o.get("dead"))),
    ]
    # The table has by_topic.csv's columns, in its order and under its names.
    by_topic = built["tables"]["by_topic"]
    head = "".join(
        f"<th>{html.escape(name).replace('_', '_<wbr>')}</th>" for name in by_topic.column_names
    )
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(k, v))}</td>" for k, v in row.items()) + "</tr>"
        for row in by_topic.to_pylist()
    )
    made = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rocktimer delivery report</title>
<style>
body {{ font: 15px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 1200px;
       color: #111827; }}
h1 {{ margin-bottom: .2rem; }} .span {{ color: #4b5563; margin-top: 0; }}
.table {{ overflow-x: auto; }}
.tiles {{ display: flex; flex-wrap: wrap; gap: .8rem; margin: 1.2rem 0; }}
.tile {{ border: 1px solid #e5e7eb; border-radius: 8px; padding: .6rem 1rem; min-width: 7rem; }}
.tile b {{ display: block; font-size: 1.4rem; }} .tile span {{ color: #4b5563; font-size: .85rem; }}
img {{ max-width: 100%; margin: .6rem 0 1.4rem; }}
table {{ border-collapse: collapse; width: 100%; font-size: .8rem; }}
th, td {{ padding: .3rem .25rem; border-bottom: 1px solid #e5e7eb; text-align: right; }}
/* by_topic.csv's ~20 columns in the page's width: a name breaks after an underscore */
th {{ vertical-align: bottom; font-size: .7rem; }} td {{ white-space: nowrap; }}
th:first-child, td:first-child {{ text-align: left; }}
</style></head><body>
<h1>rocktimer delivery report</h1>
<p class="span">{html.escape(span)} · made {made}</p>
<div class="tiles">{"".join(_tile(k, v) for k, v in tiles)}</div>
{"".join(f'<img src="{name}" alt="{title}">' for name, title in CHARTS)}
<h2>Per topic</h2>
<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>
<p>Lateness counts messages that were due in the future when sent. Tables:
by_topic, by_minute, by_attempt (.csv and .parquet, next to this file).</p>
</body></html>
"""
