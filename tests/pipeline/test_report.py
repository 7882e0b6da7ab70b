"""pipeline.report on a hand-made log: every figure equals the one worked out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from pipeline import audit, charts, cli, report
from tests.pipeline.conftest import Events, clean_log, last_json, write_events


def _by(table: Any, *keys: str) -> dict[Any, dict[str, Any]]:
    return {tuple(r[k] for k in keys): r for r in table.to_pylist()}


@pytest.mark.slow
def test_report_figures_equal_the_hand_computed_case(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = write_events(tmp_path / "events", clean_log().rows)
    out = tmp_path / "report"

    assert report.run(["--events", str(events), "--out", str(out)]) == 0

    summary = last_json(capsys.readouterr().out)
    assert summary["events"] == 20
    assert summary["topics"] == 2
    assert summary["delivered"] == 5
    # lateness of m1 50, m2 200, m5 500 (a), n1 10 (b); m3 was sent for now: not counted
    assert summary["lateness_ms"] == {"p50": 50, "p99": 500, "max": 500}
    assert summary["dead"] == 1

    by_topic = _by(pq.read_table(out / "by_topic.parquet"), "topic")
    a, b = by_topic["a",], by_topic["b",]
    assert (a["scheduled"], a["rescheduled"], a["cancelled"], a["delivered"]) == (5, 1, 1, 4)
    assert (a["received"], a["acked"], a["nacked"], a["retries"], a["dead"]) == (3, 1, 2, 1, 1)
    assert (a["lateness_p50_ms"], a["lateness_p95_ms"], a["lateness_max_ms"]) == (200, 500, 500)
    assert (a["ack_p50_ms"], a["ack_max_ms"]) == (250, 250)
    assert (b["scheduled"], b["delivered"], b["lateness_p99_ms"], b["ack_p50_ms"]) == (
        1,
        1,
        10,
        None,
    )

    by_minute = _by(pq.read_table(out / "by_minute.parquet"), "topic", "minute_ms")
    assert set(by_minute) == {("a", 0), ("a", 60_000), ("a", 120_000), ("b", 0), ("b", 120_000)}
    assert by_minute["a", 0]["delivered"] == 1
    assert by_minute["a", 0]["lateness_p50_ms"] is None
    assert by_minute["a", 60_000]["delivered"] == 3
    assert by_minute["a", 60_000]["lateness_p50_ms"] == 200
    assert (by_minute["a", 120_000]["retries"], by_minute["a", 120_000]["dead"]) == (1, 1)

    by_attempt = _by(pq.read_table(out / "by_attempt.parquet"), "topic", "attempt")
    assert (by_attempt["a", 1]["received"], by_attempt["a", 1]["acked"]) == (2, 1)
    assert (by_attempt["a", 2]["nacked"], by_attempt["a", 2]["dead"]) == (1, 1)

    assert pacsv.read_csv(out / "by_topic.csv").num_rows == 2
    for name, _ in charts.CHARTS:
        assert (out / name).read_bytes().startswith(b"\x89PNG")
    page = (out / "report.html").read_text()
    assert all(f'src="{name}"' in page for name, _ in charts.CHARTS)
    assert "<td>a</td>" in page


@pytest.mark.slow
def test_ack_times_count_each_groups_first_ack_of_a_delivered_message(
    spark: Any, tmp_path: Path
) -> None:
    e = Events()
    e.message("t", "m1", 0, 1_000).delivered("t", "m1", 1_000, 0, 1_000)
    e.add("acked", 1_100, "t", "m1", group="g")  # g: 100
    e.add("acked", 9_000, "t", "m1", group="g")  # a later ack of g's: not its first
    e.add("acked", 1_400, "t", "m1", group="h")  # h: 400
    e.message("t", "m2", 0, 2_000).delivered("t", "m2", 2_000, 0, 2_000)
    e.add("acked", 2_700, "t", "m2", group="g")  # g: 700
    e.add("acked", 5_000, "t", "gone", group="g")  # its delivery is not in the log: no wait
    events = write_events(tmp_path / "events", e.rows)

    built = report.build(spark, str(events), None, None)

    (t,) = built["tables"]["by_topic"].to_pylist()
    assert (t["acked"], t["ack_p50_ms"], t["ack_p95_ms"], t["ack_max_ms"]) == (5, 400, 700, 700)


@pytest.mark.slow
def test_acks_meet_their_delivery_without_a_sort_of_events(spark: Any, tmp_path: Path) -> None:
    """Each group's first ack and its message's first delivery are paired by hash
    aggregations and a hash join: no sort (a window over each message's events, a
    sort-merge join), whose size would be the log's."""
    from pyspark.sql import functions

    from pipeline.events import read_events

    e = Events()
    e.message("t", "m1", 0, 1_000).delivered("t", "m1", 1_000, 0, 1_000)
    e.delivered("t", "m1", 3_000, 0, 1_000)  # delivered again later: the first counts
    e.add("acked", 1_100, "t", "m1", group="g")
    e.add("acked", 900, "t", "m1", group="g")  # the group's first ack, logged after
    e.add("acked", 1_400, "t", "m1", group="h")
    e.message("u", "m1", 0, 2_000).delivered("u", "m1", 2_000, 0, 2_000)  # same id, topic u
    e.add("acked", 2_700, "u", "m1", group="g")
    e.add("acked", 5_000, "t", "gone", group="g")  # no delivery in the log
    events = write_events(tmp_path / "events", e.rows)

    pairs = report.first_acks(functions, read_events(spark, str(events)), 3)
    got = sorted(tuple(r) for r in pairs.collect())
    plan = pairs._jdf.queryExecution().executedPlan().toString()

    assert got == [
        ("t", "m1", "g", 900, 1_000),
        ("t", "m1", "h", 1_400, 1_000),
        ("u", "m1", "g", 2_700, 2_000),
    ]
    assert "Sort" not in plan, plan
    assert "Window" not in plan, plan


@pytest.mark.slow
def test_the_report_is_two_queries_over_the_events(spark: Any, tmp_path: Path) -> None:
    """Every table, percentile, the histogram and the span come from one query over the
    compact table, the acks' wait from a second: a query's fixed cost (planning, code
    generation, a few stages) is paid twice, not once per small table."""
    log = clean_log()
    log.message("a", "early", 7_000, 100_000).delivered("a", "early", 90_000, 7_000, 100_000)
    events = write_events(tmp_path / "events", log.rows)
    store = spark._jsparkSession.sharedState().statusStore()
    before = store.executionsCount()

    built = report.build(spark, str(events), None, None)

    assert store.executionsCount() - before == 2
    assert built["overall"]["delivered"] == 6
    assert dict(built["histogram"])[charts.EARLY] == 1
    assert [r["topic"] for r in built["tables"]["by_topic"].to_pylist()] == ["a", "b"]


@pytest.mark.slow
def test_time_range_keeps_events_inside_it(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = write_events(tmp_path / "events", clean_log().rows)
    argv = [
        "--events",
        str(events),
        "--out",
        str(tmp_path / "r"),
        "--from-ms",
        "60000",
        "--to-ms",
        "120000",
    ]
    assert report.run(argv) == 0
    summary = last_json(capsys.readouterr().out)
    assert (summary["events"], summary["delivered"], summary["dead"]) == (7, 3, 0)


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (None, "–"),
        (0, "0 ms"),
        (350, "350 ms"),
        (1_500, "1.5 s"),
        (150_000, "2.5 min"),
        (7_200_000, "2 h"),
        (172_800_000, "2 d"),
    ],
)
def test_human_ms(ms: int | None, text: str) -> None:
    assert charts.human_ms(ms) == text


@pytest.mark.parametrize(
    ("n", "text"), [(None, "–"), (0, "0"), (999, "999"), (1_234, "1.2k"), (3_400_000, "3.4M")]
)
def test_human_count(n: int | None, text: str) -> None:
    assert charts.human_count(n) == text


def test_bucket_labels_cover_the_edges() -> None:
    labels = [charts.bucket_label(i) for i in range(len(charts.EDGES_MS) + 1)]
    assert labels[0] == "0–1 ms"
    assert labels[1] == "1–2 ms"
    assert labels[-1] == "≥ 1 h"
    assert len(set(labels)) == len(labels)


@pytest.mark.slow
def test_the_report_shows_what_the_log_has(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Early deliveries in their own bucket and column, no column for a kind the service
    never writes, each chart's title once, the table with by_topic.csv's columns."""
    log = clean_log()
    log.message("a", "early", 7_000, 100_000).delivered("a", "early", 90_000, 7_000, 100_000)
    events = write_events(tmp_path / "events", log.rows)
    out = tmp_path / "report"

    assert report.run(["--events", str(events), "--out", str(out)]) == 0

    by_topic = pq.read_table(out / "by_topic.parquet")
    assert "filtered" not in by_topic.column_names
    assert _by(by_topic, "topic")["a",]["early"] == 1
    built = report.build(spark, str(events), None, None)
    assert dict(built["histogram"])[charts.EARLY] == 1
    assert charts.bucket_label(charts.EARLY) == "early"
    page = (out / "report.html").read_text()
    for _, title in charts.CHARTS:
        assert page.count(title) == 1, title  # the PNG's own title; the alt text
    header = page.split("<thead><tr>", 1)[1].split("</tr>", 1)[0].replace("<wbr>", "")
    columns = pacsv.read_csv(out / "by_topic.csv").column_names
    assert header == "".join(f"<th>{name}</th>" for name in columns)
    assert {"rescheduled", "received", "acked", "lateness_p95_ms"} <= set(columns)


@pytest.mark.parametrize(
    ("first", "last", "start", "end", "partial"),
    [
        (61_000, 179_000, None, None, {60_000, 120_000}),  # the log starts and ends mid-minute
        (60_000, 179_999, None, None, set()),  # whole minutes
        (61_000, 179_000, 60_000, 180_000, set()),  # the range asked for covers them whole
        (61_000, 179_000, 60_000, 150_000, {120_000}),
    ],
)
def test_partial_minutes(
    first: int, last: int, start: int | None, end: int | None, partial: set[int]
) -> None:
    assert charts.partial_minutes(first, last, start, end) == partial


@pytest.mark.slow
def test_report_writes_through_sparks_file_system(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out as a URI (hdfs://, s3a://, here file://) is written by Hadoop's FileSystem,
    not taken for a local directory named 'file:'."""
    events = write_events(tmp_path / "events", clean_log().rows)
    out = tmp_path / "report"

    assert report.run(["--events", f"file://{events}", "--out", f"file://{out}"]) == 0

    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{t}.{s}" for t in ("by_attempt", "by_minute", "by_topic") for s in ("csv", "parquet")]
        + [name for name, _ in charts.CHARTS]
        + ["report.html"]
    )
    assert pq.read_table(out / "by_topic.parquet").num_rows == 2
    assert (out / "lateness.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_a_data_dir_reports_every_partition(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given a data dir, the report reads p0's and p1's logs (seqs overlap: each partition
    numbers its own) as one."""
    log = clean_log()
    a = Events()
    a.rows = [r for r in log.rows if r["topic"] == "a"]
    b = Events()
    b.rows = [{**r, "seq": i + 1} for i, r in enumerate(x for x in log.rows if x["topic"] == "b")]
    write_events(tmp_path / "data" / "p0" / "events", a.rows)
    write_events(tmp_path / "data" / "p1" / "events", b.rows, partition=1)

    assert report.run(["--events", str(tmp_path / "data"), "--out", str(tmp_path / "r")]) == 0

    summary = last_json(capsys.readouterr().out)
    assert (summary["events"], summary["topics"], summary["delivered"]) == (20, 2, 5)


@pytest.mark.slow
def test_percentiles_are_the_exact_nearest_rank_on_many_values(spark: Any, tmp_path: Path) -> None:
    """200 000 deliveries late by 1 .. 200 000 ms, in shuffled order: p50 is the value at
    rank 100 000, p95 at 190 000, p99 at 198 000, exactly (a sketch's rank error grows
    with n); each acked after as long as it was late."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    from storage.event_table import SCHEMA

    n = 200_000
    late = list(range(1, n + 1))
    random.Random(3).shuffle(late)
    due = [1_000_000 + i for i in range(n)]
    delivered = [d + x for d, x in zip(due, late, strict=True)]
    ids = [f"m{i}" for i in range(n)]

    def kind(name: str, at: list[int], group: str | None) -> pa.Table:
        return pa.table(
            {
                "event_time_ms": at,
                "kind": [name] * n,
                "topic": ["t"] * n,
                "msg_id": ids,
                "group": pa.array([group] * n, pa.string()),
                "deliver_at_ms": due,
                "created_at_ms": [0] * n,
            }
        )

    table = pa.concat_tables(
        [
            kind("delivered", delivered, None),
            kind("acked", [d + x for d, x in zip(delivered, late, strict=True)], "g"),
        ]
    )
    table = table.append_column("seq", pa.array(range(1, 2 * n + 1), pa.int64()))
    columns = {name: table[name] if name in table.column_names else None for name in SCHEMA.names}
    segment = tmp_path / "events" / "date=1970-01-01" / f"part-1-{2 * n}.parquet"
    segment.parent.mkdir(parents=True)
    pq.write_table(
        pa.table(
            {
                name: column if column is not None else pa.nulls(2 * n, SCHEMA.field(name).type)
                for name, column in columns.items()
            },
            schema=SCHEMA,
        ),
        segment,
    )

    built = report.build(spark, str(tmp_path / "events"), None, None)

    (t,) = built["tables"]["by_topic"].to_pylist()
    assert (t["lateness_p50_ms"], t["lateness_p95_ms"], t["lateness_p99_ms"]) == (
        100_000,
        190_000,
        198_000,
    )
    assert (t["ack_p50_ms"], t["ack_p95_ms"], t["ack_max_ms"]) == (100_000, 190_000, n)
    assert built["overall"]["lateness_p99_ms"] == 198_000


@pytest.mark.slow
def test_the_per_topic_table_fits_the_page_in_a_browser(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """report.html in headless Chromium at a desktop width: the table with every column of
    by_topic.csv is readable without scrolling sideways (a screenshot is left beside it)."""
    from playwright.sync_api import sync_playwright

    from tests.console.conftest import CHROMIUM, CHROMIUM_ARGS, DESKTOP

    events = write_events(tmp_path / "events", clean_log().rows)
    out = tmp_path / "report"
    assert report.run(["--events", str(events), "--out", str(out)]) == 0

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=DESKTOP)  # type: ignore[arg-type]
            page.goto((out / "report.html").as_uri())
            page.screenshot(path=str(out / "report-page.png"), full_page=True)
            widths = page.eval_on_selector(".table", "e => [e.scrollWidth, e.clientWidth]")
            images = page.eval_on_selector_all("img", "es => es.map(e => e.naturalWidth)")
        finally:
            browser.close()
    scrolled, shown = widths
    assert scrolled <= shown, widths
    assert len(images) == len(charts.CHARTS), images
    assert all(images), images  # every chart loaded


@pytest.mark.slow
@pytest.mark.parametrize(
    ("job", "argv", "named"),
    [
        (report, ["--events", "s3a://bucket/events", "--out", "OUT"], "s3a://bucket/events"),
        (report, ["--events", "EVENTS", "--out", "s3a://bucket/report"], "s3a://bucket/report"),
        (audit, ["--events", "s3a://bucket/events"], "s3a://bucket/events"),
    ],
)
def test_a_path_hadoop_cannot_open_is_one_line_and_exit_2(
    spark: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    job: Any,
    argv: list[str],
    named: str,
) -> None:
    """A scheme passes the argument check (it is Hadoop's to open); when Hadoop has no
    FileSystem for it (s3a without hadoop-aws on the classpath) the job says so in one
    line naming the path, exit 2, before any work."""
    events = write_events(tmp_path / "events", clean_log().rows)
    paths = {"EVENTS": str(events), "OUT": str(tmp_path / "out")}

    with pytest.raises(SystemExit) as exited:
        cli.main(job.run, [paths.get(a, a) for a in argv])

    assert exited.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"error: {named}: "), err
    assert err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_an_over_time_chart_of_zeros_has_a_readable_axis() -> None:
    """No retries at all: the y axis runs 0 to 1, not ±0.05 with every tick reading "0"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = {0: {"retries": 0}, 60_000: {"retries": 0}}
    axis = charts.Axis(0, 60_000, set())
    fig = charts.over_time_figure(minutes, axis, [("retries", "retries", "red")], "t", "s")
    try:
        fig.canvas.draw()
        (ax,) = fig.axes
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert ax.get_ylim() == (0, 1)
        assert len(set(labels)) == len(labels), labels
    finally:
        plt.close(fig)


def test_over_time_charts_line_up_and_mark_partial_minutes() -> None:
    """Throughput (tens of thousands a minute) and retries (a handful) over the same
    minutes: the same plot area and x range, so a minute is at one place in both; the
    partial first minute has a band behind it and hollow points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = {
        m: {"delivered": 40_000 + m // 1000, "retries": 3} for m in range(0, 600_000, 60_000)
    }
    axis = charts.Axis(0, 540_000, {0})
    figures = [
        charts.over_time_figure(minutes, axis, [(key, key, "blue")], key, "")
        for key in ("delivered", "retries")
    ]
    try:
        for fig in figures:
            fig.canvas.draw()
        big, small = (fig.axes[0] for fig in figures)
        assert big.get_position().bounds == small.get_position().bounds
        assert big.get_xlim() == small.get_xlim()
        for ax in (big, small):
            bands = [p for p in ax.patches if p.get_facecolor()[:3] != (1.0, 1.0, 1.0)]
            (band,) = bands
            x0, x1 = band.get_x(), band.get_x() + band.get_width()
            assert (x0, x1) == (0, 60_000 / 86_400_000)  # minute 0, in matplotlib's days
            hollow = [line for line in ax.lines if line.get_markerfacecolor() == "white"]
            assert len(hollow) == 1
    finally:
        for fig in figures:
            plt.close(fig)
