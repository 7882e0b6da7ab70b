"""``python -m pipeline.report``: what the service did, per topic and per topic and minute,
as Parquet + CSV, three PNG charts and a report.html that shows them.

Lateness is ``delivered.event_time_ms - deliver_at_ms`` for messages that were due in the
future when sent (``deliver_at_ms > created_at_ms``): a message sent "now" is not late.
A delivery before its due time (negative lateness) is also counted as ``early``: it is a
broken promise, and the lateness histogram gives it its own bucket.
Percentiles are nearest-rank: the value at rank ⌈p·n⌉ of the n sorted values, exact.

Reads of the segments, each a hash aggregation (no sort of events), nothing else at their
size:
- one to a compact table, a row per (topic, minute, attempt, lateness) with a count of
  each kind of event (deliveries due at once share a lateness: ~100k rows for 10M
  events); every count, the percentiles (from the counts of each lateness), the
  histogram and the span are computed from it, cached;
- the acks' wait after their message's delivery, which pairs events of one message: two
  hash aggregations keyed on the message and a hash join of them (``first_acks``).
"""

from __future__ import annotations

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


def _figures(F: Any, c: Any, keys: list[str]) -> Any:
    """Counts per kind, retries (receives after the first), early deliveries and the
    lateness p50/p95/p99/max per ``keys`` (at least one: the totals group by a constant),
    from the compact table."""
    counts = c.groupBy(*keys).agg(
        *[F.sum(k).alias(k) for k in COUNTED],
        F.sum(F.when(F.col("attempt") > 1, F.col("received")).otherwise(0)).alias("retries"),
        F.sum(F.when(F.col("late") < 0, F.col("delivered")).otherwise(0)).alias("early"),
    )
    late = (
        c.where(F.col("late").isNotNull()).groupBy(*keys, "late").agg(F.sum("delivered").alias("n"))
    )
    pct = nearest_rank(F, late, keys, "late", "n", LATENESS_PERCENTILES, "lateness")
    return counts.join(pct, keys, "left")


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
    """The report's tables as pyarrow Tables, plus the overall figures."""
    from pyspark.sql import functions as F

    ev = read_events(spark, events, from_ms, to_ms).where(F.col("kind").isin(*KINDS))
    c = compact(F, ev).cache()  # small: read by every table below
    try:
        deliveries = c.agg(F.sum("delivered")).first()[0] or 0
        by_topic = _figures(F, c, ["topic"]).join(_ack_times(F, ev, deliveries), "topic", "left")
        by_minute = _figures(F, c, ["topic", "minute_ms"])
        by_attempt = (
            c.where(F.col("attempt").isNotNull())
            .groupBy("topic", "attempt")
            .agg(*[F.sum(k).alias(k) for k in ("received", "acked", "nacked", "expired", "dead")])
        )
        everything = c.withColumn("all", F.lit(1))
        span = everything.groupBy("all").agg(
            F.min("first_ms").alias("first_ms"), F.max("last_ms").alias("last_ms")
        )
        total = _figures(F, everything, ["all"]).join(span, "all").drop("all")
        late = F.col("late")
        hist = (
            c.where(late.isNotNull())
            .groupBy(charts.bucket_expr(F, late).alias("bucket"))
            .agg(F.sum("delivered").alias("n"))
        )
        tables = {
            "by_topic": _ordered(by_topic, ["topic"]).toArrow(),
            "by_minute": _ordered(by_minute, ["topic", "minute_ms"]).toArrow(),
            "by_attempt": by_attempt.orderBy("topic", "attempt").toArrow(),
        }
        overall = total.collect()
        histogram = sorted((r["bucket"], r["n"]) for r in hist.collect() if r["n"])
    finally:
        c.unpersist()
    row = overall[0].asDict() if overall else {}
    return {
        "tables": tables,
        "overall": row,
        "histogram": histogram,
        "events": sum(row.get(k) or 0 for k in COUNTED),
        "range": (from_ms, to_ms),
    }


def _ordered(df: Any, keys: list[str]) -> Any:
    """``df`` sorted by ``keys``, its columns in by_topic.csv's order."""
    lateness = [f"lateness_{name}_ms" for name, _ in (*LATENESS_PERCENTILES, ("max", 0))]
    ack = [f"ack_{name}_ms" for name, _ in (*ACK_PERCENTILES, ("max", 0))]
    columns = [*keys, *COUNTED, "retries", "early", *lateness]
    columns += [name for name in ack if name in df.columns]
    return df.select(*columns).orderBy(*keys)


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
    spark = cli.session(args.master, "report")
    cli.filesystem(spark, args.out)  # a scheme Hadoop cannot write: said before the work
    with cli.progress(spark, "report"):
        built = build(spark, args.events, args.from_ms, args.to_ms)
        write(spark, args.out, built, charts.span_text(args.from_ms, args.to_ms))
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
