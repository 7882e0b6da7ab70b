"""``python -m pipeline.report``: what the service did, per topic and per topic and minute,
as Parquet + CSV, three PNG charts and a report.html that shows them.

Lateness is ``delivered.event_time_ms - deliver_at_ms`` for messages that were due in the
future when sent (``deliver_at_ms > created_at_ms``): a message sent "now" is not late.
A delivery before its due time (negative lateness) is also counted as ``early``: it is a
broken promise, and the lateness histogram gives it its own bucket.
Percentiles are nearest-rank: the value at rank ⌈p·n⌉ of the n sorted values, exact.

Two Spark queries, each reading the segments with hash aggregations (no sort of events),
nothing else at their size (every query and stage has a fixed cost: planning, code
generation, scheduling; small jobs would cost more than the rows they touch):
- one to a compact table, a row per (topic, minute, attempt, lateness) with a count of
  each kind of event (deliveries due at once share a lateness: ~100k rows for 10M
  events), cached; from it every table, the percentiles (from the counts of each
  lateness), the histogram and the span, as the grouping sets of two aggregations in the
  same query (``figures``), brought to the driver as one Arrow table and split there;
- the acks' wait after their message's delivery, which pairs events of one message: two
  hash aggregations keyed on the message and a hash join of them (``first_acks``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from pipeline import charts, cli
from pipeline.events import KINDS, MINUTE_MS, read_events, time_range

COUNTED = KINDS  # a count of each kind of event, in the event schema's order
# Nearest-rank percentiles as (name suffix, per mille): integer ranks, no float rounding.
LATENESS_PERCENTILES = (("p50", 500), ("p95", 950), ("p99", 990))
ACK_PERCENTILES = (("p50", 500), ("p95", 950))
# Deliveries a task of the acks' join holds in its hash table at most (~100 bytes each).
ACK_JOIN_ROWS = 1_000_000
# The tables the compact table gives, each a grouping set of one aggregation (``figures``):
# name -> the columns of GROUPED it groups by. by_topic, by_minute and the totals
# (``overall``) carry the lateness percentiles too (WITH_LATENESS).
GROUPED = ("topic", "minute_ms", "attempt", "bucket")
TABLES: dict[str, tuple[str, ...]] = {
    "by_topic": ("topic",),
    "by_minute": ("topic", "minute_ms"),
    "overall": (),
    "by_attempt": ("topic", "attempt"),
    "histogram": ("bucket",),
}
WITH_LATENESS = ("by_topic", "by_minute", "overall")
LATE_GROUPED = ("topic", "minute_ms")  # the keys of WITH_LATENESS's sets
ATTEMPT_COUNTED = ("received", "acked", "nacked", "expired", "dead")  # by_attempt's counts


def _lateness(F: Any) -> Any:
    """A delivery's lateness, for messages due in the future when sent; null otherwise."""
    return F.when(
        (F.col("kind") == "delivered")
        & (F.col("created_at_ms").isNull() | (F.col("deliver_at_ms") > F.col("created_at_ms"))),
        F.col("event_time_ms") - F.col("deliver_at_ms"),
    )


def compact(F: Any, ev: Any) -> Any:
    """The events as a row per (topic, minute, attempt, lateness) and a count per kind."""
    minute = F.col("event_time_ms") - F.col("event_time_ms") % MINUTE_MS
    return ev.groupBy(
        "topic", minute.alias("minute_ms"), "attempt", _lateness(F).alias("late")
    ).agg(
        *[F.count(F.when(F.col("kind") == k, 1)).alias(k) for k in COUNTED],
        F.min("event_time_ms").alias("first_ms"),
        F.max("event_time_ms").alias("last_ms"),
    )


def nearest_rank(
    F: Any, values: Any, keys: list[str], value: str, count: str, percentiles: Any, prefix: str
) -> Any:
    """Per ``keys``: the nearest-rank percentiles (``prefix_<name>_ms``) and the max
    (``prefix_max_ms``) of ``value``, from rows of (keys, value, how many ``count``).

    The value at rank ⌈p·n⌉ is the first whose running count reaches it; a window over
    distinct values, not over every event."""
    from pyspark.sql import Window

    group = Window.partitionBy(*keys)
    running = group.orderBy(value).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    ranked = values.select(
        *keys,
        value,
        F.sum(count).over(running).alias("_upto"),
        F.sum(count).over(group).alias("_n"),
    )
    at = [
        F.min(F.when(F.col("_upto") * 1000 >= F.col("_n") * per_mille, F.col(value))).alias(
            f"{prefix}_{name}_ms"
        )
        for name, per_mille in percentiles
    ]
    return ranked.groupBy(*keys).agg(*at, F.max(value).alias(f"{prefix}_max_ms"))


def grouping_sets(
    F: Any, df: Any, sets: dict[str, tuple[str, ...]], columns: tuple[str, ...], *aggs: Any
) -> Any:
    """``df`` aggregated by each of ``sets`` (grouping sets over ``columns``) in one pass:
    a row per group of each set, its set's name in ``table``, the columns a set does not
    group by null."""
    grouped = df.groupingSets([list(keys) for keys in sets.values()], *columns).agg(
        *aggs, F.grouping_id().alias("_set")
    )
    name: Any = None
    for table, keys in sets.items():
        # grouping_id(): a bit per column of ``columns``, set when the row is not grouped by it
        bits = sum(1 << (len(columns) - 1 - i) for i, c in enumerate(columns) if c not in keys)
        named = F.col("_set") == bits
        name = F.when(named, F.lit(table)) if name is None else name.when(named, F.lit(table))
    return grouped.select(
        name.alias("table"), *columns, *(a for a in grouped.columns[len(columns) : -1])
    )


def figures(F: Any, c: Any) -> Any:
    """Every table the compact table gives, as the rows of one query (``TABLES``, named in
    ``table``): counts per kind, retries (receives after the first), early deliveries, the
    span, and for ``WITH_LATENESS`` the lateness p50/p95/p99/max, from the same pass."""
    late = F.col("late")
    counts = grouping_sets(
        F,
        c.withColumn("bucket", F.when(late.isNotNull(), charts.bucket_expr(F, late))),
        TABLES,
        GROUPED,
        *[F.sum(k).alias(k) for k in COUNTED],
        F.sum(F.when(F.col("attempt") > 1, F.col("received")).otherwise(0)).alias("retries"),
        F.sum(F.when(late < 0, F.col("delivered")).otherwise(0)).alias("early"),
        F.min("first_ms").alias("first_ms"),
        F.max("last_ms").alias("last_ms"),
    )
    late_sets = {name: (*TABLES[name], "late") for name in WITH_LATENESS}
    values = grouping_sets(
        F,
        c.where(late.isNotNull()),
        late_sets,
        (*LATE_GROUPED, "late"),
        F.sum("delivered").alias("n"),
    )
    keys = ["table", *LATE_GROUPED]
    pct = nearest_rank(F, values, keys, "late", "n", LATENESS_PERCENTILES, "lateness")
    pct = pct.select(*[F.col(k).alias(f"_{k}") for k in keys], *pct.columns[len(keys) :])
    on = [counts[k].eqNullSafe(pct[f"_{k}"]) for k in keys]
    return counts.join(pct, on, "left").drop(*[f"_{k}" for k in keys])


def first_acks(F: Any, ev: Any, tasks: int) -> Any:
    """A row per (topic, msg_id, group) a group acked and whose delivery is in the log: the
    message's first delivery ``delivered_ms`` and the group's first ack ``acked_ms``.

    Two hash aggregations keyed on the message (each group's first ack; each message's
    first delivery), both laid out by (topic, msg_id) over ``tasks`` tasks, so their join
    moves no row again and is a hash join: no sort of the events (a window over each
    message's events, a sort-merge join), whose size is the log's. A task holds its share
    of the deliveries in a hash table (``ACK_JOIN_ROWS``)."""
    acks = (
        ev.where(F.col("kind") == "acked")
        .repartition(tasks, "topic", "msg_id")
        .groupBy("topic", "msg_id", "group")
        .agg(F.min("event_time_ms").alias("acked_ms"))
    )
    delivered = (
        ev.where(F.col("kind") == "delivered")
        .repartition(tasks, "topic", "msg_id")
        .groupBy("topic", "msg_id")
        .agg(F.min("event_time_ms").alias("delivered_ms"))
    )
    return acks.join(delivered.hint("shuffle_hash"), ["topic", "msg_id"])


def _ack_times(F: Any, ev: Any, deliveries: int) -> Any:
    """Per topic: time from delivered to a group's first ack, p50/p95/max (``deliveries``:
    the log's delivered events, for the tasks of ``first_acks``)."""
    default = int(ev.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    tasks = max(default, -(-deliveries // ACK_JOIN_ROWS))
    wait = (F.col("acked_ms") - F.col("delivered_ms")).alias("wait")
    waits = first_acks(F, ev, tasks).groupBy("topic", wait).agg(F.count(F.lit(1)).alias("n"))
    return nearest_rank(F, waits, ["topic"], "wait", "n", ACK_PERCENTILES, "ack")


def build(spark: Any, events: str, from_ms: int | None, to_ms: int | None) -> dict[str, Any]:
    """The report's tables as pyarrow Tables, plus the overall figures: two Spark queries,
    the compact table's figures (one read of the segments) and the acks' wait (a read of
    the acks and one of the deliveries)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    ev = read_events(spark, events, from_ms, to_ms).where(F.col("kind").isin(*KINDS))
    c = compact(F, ev).cache()  # small: both halves of ``figures`` read it
    try:
        rows = figures(F, c).toArrow()
    finally:
        c.unpersist()
    of = {name: rows.filter(pc.equal(rows["table"], name)) for name in TABLES}
    (overall,) = of["overall"].to_pylist() or [{}]
    figure_columns = [*COUNTED, "retries", "early", *_lateness_columns()]
    row = {k: overall[k] for k in [*figure_columns, "first_ms", "last_ms"]} if overall else {}
    acks = _ack_times(F, ev, row.get("delivered") or 0).toArrow()
    by_topic = _sorted(of["by_topic"], ["topic"], figure_columns)
    at = {topic: i for i, topic in enumerate(acks["topic"].to_pylist()) if topic is not None}
    ack_rows = pa.array([at.get(topic) for topic in by_topic["topic"].to_pylist()], pa.int64())
    for name in acks.column_names[1:]:
        by_topic = by_topic.append_column(acks.schema.field(name), acks[name].take(ack_rows))
    attempts = of["by_attempt"].filter(pc.is_valid(of["by_attempt"]["attempt"]))
    hist = of["histogram"].filter(pc.is_valid(of["histogram"]["bucket"]))
    tables = {
        "by_topic": by_topic,
        "by_minute": _sorted(of["by_minute"], ["topic", "minute_ms"], figure_columns),
        "by_attempt": _sorted(attempts, ["topic", "attempt"], list(ATTEMPT_COUNTED)),
    }
    histogram = sorted(
        (b, n)
        for b, n in zip(hist["bucket"].to_pylist(), hist["delivered"].to_pylist(), strict=True)
        if n
    )
    return {
        "tables": tables,
        "overall": row,
        "histogram": histogram,
        "events": sum(row.get(k) or 0 for k in COUNTED),
        "range": (from_ms, to_ms),
    }


def _lateness_columns() -> list[str]:
    return [f"lateness_{name}_ms" for name, _ in (*LATENESS_PERCENTILES, ("max", 0))]


def _sorted(table: Any, keys: list[str], columns: list[str]) -> Any:
    """``table``'s ``keys`` and ``columns``, sorted by ``keys`` (nulls first, as Spark's
    ascending order)."""
    chosen = table.select([*keys, *columns])
    return chosen.sort_by([(k, "ascending", "at_start") for k in keys])


def write(spark: Any, out: str, built: dict[str, Any], span: str) -> None:
    """The tables (Parquet and CSV), charts and report.html under ``out``, through Spark's
    (Hadoop's) file system: a local directory, hdfs://, s3a://, or a cluster's default."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    files: dict[str, bytes] = {}
    for name, table in built["tables"].items():
        for suffix, writer in (("parquet", pq.write_table), ("csv", pacsv.write_csv)):
            sink = pa.BufferOutputStream()
            writer(table, sink)
            files[f"{name}.{suffix}"] = sink.getvalue().to_pybytes()
    files.update(charts.render(built, span))
    for name, data in files.items():
        cli.write_file(spark, f"{out.rstrip('/')}/{name}", data)


def run(argv: list[str]) -> int:
    p = cli.parser("report", "Delivery report from the service's event log.")
    p.add_argument(
        "--events",
        required=True,
        help="the events directory (<data_dir>/events), or a data dir: every partition's log",
    )
    p.add_argument("--out", required=True, help="directory for the tables, charts, report.html")
    time_range(p)
    args = p.parse_args(argv)
    cli.require_path(args.events, directory=True, master=args.master)
    started = time.monotonic()
    # The charts' library loads while the JVM starts and the queries run.
    charts_loaded = threading.Thread(target=charts.load, name="load-charts")
    charts_loaded.start()
    try:
        spark = cli.session(args.master, "report")
        cli.filesystem(spark, args.out)  # a scheme Hadoop cannot write: said before the work
        with cli.progress(spark, "report"):
            built = build(spark, args.events, args.from_ms, args.to_ms)
            charts_loaded.join()
            write(spark, args.out, built, charts.span_text(args.from_ms, args.to_ms))
    finally:
        charts_loaded.join()
    o = built["overall"]
    cli.emit(
        {
            "events": built["events"],
            "topics": built["tables"]["by_topic"].num_rows,
            "delivered": o.get("delivered", 0),
            "lateness_ms": {
                "p50": o.get("lateness_p50_ms"),
                "p99": o.get("lateness_p99_ms"),
                "max": o.get("lateness_max_ms"),
            },
            "dead": o.get("dead", 0),
            "seconds": round(time.monotonic() - started, 3),
        }
    )
    return cli.EXIT_OK


if __name__ == "__main__":
    cli.main(run)
