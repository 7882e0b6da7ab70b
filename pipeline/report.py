"""``python -m pipeline.report``: what the service did, per topic and per topic and minute,
as Parquet + CSV, three PNG charts and a report.html that shows them.

Lateness is ``delivered.event_time_ms - deliver_at_ms`` for messages that were due in the
future when sent (``deliver_at_ms > created_at_ms``): a message sent "now" is not late.
A delivery before its due time (negative lateness) is also counted as ``early``: it is a
broken promise, and the lateness histogram gives it its own bucket.
Percentiles are nearest-rank (an actual value, exact on small data).
"""

from __future__ import annotations

import time
from typing import Any

from pipeline import charts, cli
from pipeline.events import COLUMNS, KINDS, MINUTE_MS, PARTITION, read_events, time_range

# The columns the tables read: every event column but these.
USED = tuple(column for column in COLUMNS if column not in ("seq", "tag", PARTITION))
PERCENTILE_ACCURACY = 10_000  # percentile_approx: rank error 1/10 000, exact below that
COUNTED = KINDS  # a count of each kind of event, in the event schema's order


def _lateness(F: Any) -> Any:
    """A delivery's lateness, for messages due in the future when sent; null otherwise."""
    return F.when(
        (F.col("kind") == "delivered")
        & (F.col("created_at_ms").isNull() | (F.col("deliver_at_ms") > F.col("created_at_ms"))),
        F.col("event_time_ms") - F.col("deliver_at_ms"),
    )


def _figures(F: Any, ev: Any, keys: list[str], extra: dict[str, Any] | None = None) -> Any:
    """Counts per kind, lateness p50/p95/p99/max, retries (receives after the first), and
    the ``extra`` aggregates."""
    late = _lateness(F)
    pct = F.percentile_approx(late, [0.5, 0.95, 0.99], PERCENTILE_ACCURACY)
    aggs = [F.count(F.when(F.col("kind") == k, 1)).alias(k) for k in COUNTED]
    aggs += [
        F.count(F.when((F.col("kind") == "received") & (F.col("attempt") > 1), 1)).alias("retries"),
        F.count(F.when(late < 0, 1)).alias("early"),
        pct.alias("_pct"),
        F.max(late).alias("lateness_max_ms"),
    ]
    extra = extra or {}
    out = ev.groupBy(*keys).agg(*aggs, *[value.alias(name) for name, value in extra.items()])
    return out.select(
        *keys,
        *COUNTED,
        "retries",
        "early",
        F.col("_pct")[0].alias("lateness_p50_ms"),
        F.col("_pct")[1].alias("lateness_p95_ms"),
        F.col("_pct")[2].alias("lateness_p99_ms"),
        "lateness_max_ms",
        *extra,
    )


def _ack_times(F: Any, ev: Any) -> Any:
    """Per topic: time from delivered to a group's first ack, p50/p95/max.

    A window over each message gives its acks their delivery time; the acks' grouping by
    (message, group) then needs no second shuffle, as a join of two aggregates would
    (10M events: 10 s instead of 17)."""
    from pyspark.sql import Window

    delivered = F.min(F.when(F.col("kind") == "delivered", F.col("event_time_ms")))
    acks = (
        ev.where(F.col("kind").isin("delivered", "acked"))
        .withColumn("delivered_ms", delivered.over(Window.partitionBy("topic", "msg_id")))
        .where((F.col("kind") == "acked") & F.col("delivered_ms").isNotNull())
        .groupBy("topic", "msg_id", "group", "delivered_ms")
        .agg(F.min("event_time_ms").alias("acked_ms"))
    )
    wait = F.col("acked_ms") - F.col("delivered_ms")
    pct = F.percentile_approx(wait, [0.5, 0.95], PERCENTILE_ACCURACY)
    return (
        acks.groupBy("topic")
        .agg(pct.alias("_pct"), F.max(wait).alias("ack_max_ms"))
        .select(
            "topic",
            F.col("_pct")[0].alias("ack_p50_ms"),
            F.col("_pct")[1].alias("ack_p95_ms"),
            "ack_max_ms",
        )
    )


def build(spark: Any, events: str, from_ms: int | None, to_ms: int | None) -> dict[str, Any]:
    """The report's tables as pyarrow Tables, plus the overall figures."""
    from pyspark.sql import functions as F

    # Cached as the columns the tables use: seq, tag and partition would be a fifth of it.
    ev = (
        read_events(spark, events, from_ms, to_ms)
        .where(F.col("kind").isin(*KINDS))
        .select(*USED)
        .cache()
    )
    try:
        by_topic = _figures(F, ev, ["topic"]).join(_ack_times(F, ev), "topic", "left")
        minute = (F.col("event_time_ms") - F.col("event_time_ms") % MINUTE_MS).alias("minute_ms")
        by_minute = _figures(F, ev.withColumn("minute_ms", minute), ["topic", "minute_ms"])
        by_attempt = (
            ev.where(F.col("attempt").isNotNull())
            .groupBy("topic", "attempt")
            .agg(
                *[
                    F.count(F.when(F.col("kind") == k, 1)).alias(k)
                    for k in ("received", "acked", "nacked", "expired", "dead")
                ]
            )
        )
        # The overall figures, the span and the lateness histogram in one aggregation
        # (one pass over the cache, not four).
        # The bucket is a column computed once a row: inside each bucket's count it would
        # be 22 copies of a 20-way expression to generate code for and evaluate.
        late = _lateness(F)
        bucket = F.when(late.isNotNull(), charts.bucket_expr(F, late))
        buckets = range(charts.EARLY, len(charts.EDGES_MS) + 1)
        extra = {
            "events": F.count(F.lit(1)),
            "first_ms": F.min("event_time_ms"),
            "last_ms": F.max("event_time_ms"),
            **{f"_bucket{i}": F.count(F.when(F.col("_b") == i, 1)) for i in buckets},
        }
        everything = ev.withColumn("all", F.lit(1)).withColumn("_b", bucket)
        total = _figures(F, everything, ["all"], extra).drop("all")
        tables = {
            "by_topic": by_topic.orderBy("topic").toArrow(),
            "by_minute": by_minute.orderBy("topic", "minute_ms").toArrow(),
            "by_attempt": by_attempt.orderBy("topic", "attempt").toArrow(),
        }
        overall = total.collect()
    finally:
        ev.unpersist()
    row = overall[0].asDict() if overall else {}
    hist = [(i, n) for i in buckets if (n := row.pop(f"_bucket{i}", 0))]
    events_n = row.pop("events", 0)
    return {
        "tables": tables,
        "overall": row,
        "histogram": hist,
        "events": events_n,
        "range": (from_ms, to_ms),
    }


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
