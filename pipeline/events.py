"""The event log as the jobs read it: sealed Parquet segments (pipeline.md §1)."""

from __future__ import annotations

from typing import Any

from pipeline import cli
from storage.events import COLUMNS as EVENT_COLUMNS
from storage.events import PARTITION_COLUMN, EventKind

# The kinds of event the service writes (pipeline.md §1).
KINDS = tuple(kind.name.lower() for kind in EventKind)
# A partitioned data dir keeps each partition's log under ``p<k>/events/`` and its
# segments carry the partition in this column; a segment without it (one partition, or
# sealed before the column) is partition 0's. Events are named by (partition, seq): each
# partition numbers its own.
PARTITION = PARTITION_COLUMN[0]
COLUMNS = (*(name for name, _, _ in EVENT_COLUMNS), PARTITION)
_SPARK_TYPES = {"int64": "long", "int32": "int", "string": "string"}
EVENT_DDL = ", ".join(
    [*(f"`{name}` {_SPARK_TYPES[kind]}" for name, kind, _ in EVENT_COLUMNS), f"`{PARTITION}` int"]
)
MINUTE_MS = 60_000
EVENTS_DIR = "events"  # <data_dir>/events, or <data_dir>/p<k>/events with partitions
PARTITION_EVENTS_GLOB = "p[0-9]*/events"


def read_events(spark: Any, path: str, from_ms: int | None = None, to_ms: int | None = None) -> Any:
    """Every sealed event under ``path`` with ``from_ms <= event_time_ms < to_ms``; exit 2 if
    ``path`` is not there. ``path``: an events directory (``date=…`` directories or
    segments directly), or a data dir, whose every partition's log is read."""
    from pyspark.sql import functions as F

    cli.require_path(path, directory=True, master=spark.sparkContext.master)
    df = (
        spark.read.schema(EVENT_DDL)
        .option("recursiveFileLookup", True)
        .option("pathGlobFilter", "*.parquet")
        .parquet(*event_dirs(spark, path))
        .withColumn(PARTITION, F.coalesce(F.col(PARTITION), F.lit(0)))
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


def event_dirs(spark: Any, path: str) -> list[str]:
    """The event logs ``path`` holds, through Hadoop's file system (any scheme): a data
    dir's ``events/`` and each ``p<k>/events/``; else ``path`` itself, an events directory."""
    hadoop_path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path
    fs, base = cli.filesystem(spark, path)
    found = []
    with cli.hadoop_path_errors(path):
        single = hadoop_path(base, EVENTS_DIR)
        if fs.isDirectory(single):
            found.append(single.toString())
        for status in fs.globStatus(hadoop_path(base, PARTITION_EVENTS_GLOB)) or []:
            if status.isDirectory():
                found.append(status.getPath().toString())
    return found or [path]
