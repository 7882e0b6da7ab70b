"""One real Spark local[1] session for every pipeline test (started once, ~5 s), and
event-log segments written by hand in the schema of pipeline.md §1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline import cli
from tests.support.server import Server


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = cli.session("local[1]", "tests")
    yield session
    session.stop()


def write_events(
    directory: Path, events: list[dict[str, Any]], partition: int | None = None
) -> Path:
    """``events`` as one sealed segment ``date=…/part-<first>-<last>.parquet``, plus a
    half-written one under a hidden name that readers must skip. With ``partition``, the
    segment has the column a partitioned data dir's segments carry (``p<k>/events/``);
    without, it is a segment of one partition's data dir as sealed before that column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from storage.event_table import SCHEMA, SEGMENT_SCHEMA

    schema = SCHEMA if partition is None else SEGMENT_SCHEMA
    rows = [{name: e.get(name) for name in SCHEMA.names} for e in events]
    if partition is not None:
        rows = [{**row, "partition": partition} for row in rows]
    seqs = [e["seq"] for e in events]
    part = directory / "date=1970-01-01"
    part.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, part / f"part-{min(seqs)}-{max(seqs)}.parquet", compression="zstd")
    (part / f".part-{max(seqs) + 1}-{max(seqs) + 9}.parquet").write_bytes(b"half written")
    return directory


def last_json(text: str) -> dict[str, Any]:
    """The job's summary: the last line on stdout."""
    summary: dict[str, Any] = json.loads(text.strip().splitlines()[-1])
    return summary


class Events:
    """A hand-made log: ``add`` numbers the events in order."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, kind: str, at: int, topic: str, msg_id: str, **fields: Any) -> Events:
        """Like the service's, every event of a message carries its created_at_ms (that of
        the message's latest ``scheduled`` event here, unless given)."""
        if "created_at_ms" not in fields:
            created = [
                r["created_at_ms"]
                for r in self.rows
                if (r["kind"], r["topic"], r["msg_id"]) == ("scheduled", topic, msg_id)
            ]
            fields["created_at_ms"] = created[-1] if created else None
        self.rows.append(
            {
                "seq": len(self.rows) + 1,
                "event_time_ms": at,
                "kind": kind,
                "topic": topic,
                "msg_id": msg_id,
                **fields,
            }
        )
        return self

    def message(self, topic: str, msg_id: str, created: int, due: int) -> Events:
        return self.add(
            "scheduled", created, topic, msg_id, deliver_at_ms=due, created_at_ms=created
        )

    def delivered(self, topic: str, msg_id: str, at: int, created: int, due: int) -> Events:
        return self.add("delivered", at, topic, msg_id, deliver_at_ms=due, created_at_ms=created)


def clean_log() -> Events:
    """The hand-computed case (figures in test_report.py): topics a and b, one cancel, one
    reschedule, one retry that ends in the DLQ, one message sent for now."""
    e = Events()
    e.message("a", "m1", 1_000, 61_000).message("b", "n1", 1_000, 121_000)
    e.message("a", "m2", 2_000, 62_000).message("a", "m3", 3_000, 3_000)
    e.delivered("a", "m3", 3_010, 3_000, 3_000)
    e.message("a", "m4", 4_000, 64_000).add("cancelled", 5_000, "a", "m4")
    e.message("a", "m5", 5_000, 65_000)
    e.add("rescheduled", 6_000, "a", "m5", deliver_at_ms=66_000, created_at_ms=5_000)
    e.delivered("a", "m1", 61_050, 1_000, 61_000)
    e.add("received", 61_100, "a", "m1", group="g", attempt=1)
    e.delivered("a", "m2", 62_200, 2_000, 62_000)
    e.add("received", 62_300, "a", "m2", group="g", attempt=1)
    e.add("acked", 61_300, "a", "m1", group="g", attempt=1)
    e.add("nacked", 62_400, "a", "m2", group="g", attempt=1)
    e.delivered("a", "m5", 66_500, 5_000, 66_000)
    e.delivered("b", "n1", 121_010, 1_000, 121_000)
    e.add("received", 125_000, "a", "m2", group="g", attempt=2)
    e.add("nacked", 125_500, "a", "m2", group="g", attempt=2)
    e.add("dead", 126_000, "a", "m2", group="g", attempt=2)
    return e


@pytest.fixture
def service(server: Server) -> Server:
    """The shared server (tests/conftest.py), as the bulk loads name it."""
    return server
