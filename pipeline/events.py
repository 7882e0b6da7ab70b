"""The event log as the jobs read it: sealed Parquet segments (pipeline.md §1)."""

from __future__ import annotations

from typing import Any

from pipeline import cli
from storage.events import COLUMNS as EVENT_COLUMNS
from storage.events import EventKind

# The kinds of event the service writes (pipeline.md §1).
KINDS = tuple(kind.name.lower() for kind in EventKind)
COLUMNS = tuple(name for name, _, _ in EVENT_COLUMNS)
_SPARK_TYPES = {"int64": "long", "int32": "int", "string": "string"}
EVENT_DDL = ", ".join(f"`{name}` {_SPARK_TYPES[kind]}" for name, kind, _ in EVENT_COLUMNS)
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
