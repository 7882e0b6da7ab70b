"""The event log as the jobs read it: sealed Parquet segments (pipeline.md §1)."""

from __future__ import annotations

from typing import Any

from pipeline import cli

# The kinds of event the service writes (pipeline.md §1). A message a filtered group skips
# is not one: the group reads a tag index and never visits it.
KINDS = (
    "scheduled",
    "rescheduled",
    "cancelled",
    "delivered",
    "received",
    "acked",
    "nacked",
    "expired",
    "dead",
    "redriven",
)
EVENT_DDL = (
    "seq long, event_time_ms long, kind string, topic string, msg_id string, `group` string, "
    "attempt int, deliver_at_ms long, created_at_ms long, tag string"
)
COLUMNS = (
    "seq",
    "event_time_ms",
    "kind",
    "topic",
    "msg_id",
    "group",
    "attempt",
    "deliver_at_ms",
    "created_at_ms",
    "tag",
)
MINUTE_MS = 60_000


def read_events(spark: Any, path: str, from_ms: int | None = None, to_ms: int | None = None) -> Any:
    """Every sealed event under ``path`` (``date=…`` directories or segments directly),
    with ``from_ms <= event_time_ms < to_ms``; exit 2 if ``path`` is not there."""
    from pyspark.sql import functions as F

    cli.require_path(path, directory=True, master=spark.sparkContext.master)
    df = (
        spark.read.schema(EVENT_DDL)
        .option("recursiveFileLookup", True)
        .option("pathGlobFilter", "*.parquet")
        .parquet(path)
        .select(*COLUMNS)
    )
    if from_ms is not None:
        df = df.where(F.col("event_time_ms") >= from_ms)
    if to_ms is not None:
        df = df.where(F.col("event_time_ms") < to_ms)
    return df


def time_range(parser: cli.ArgumentParser) -> None:
    parser.add_argument("--from-ms", type=int, help="only events at or after this time")
    parser.add_argument("--to-ms", type=int, help="only events before this time")
