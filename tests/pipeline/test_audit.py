"""pipeline.audit: a clean log passes; each planted breach of a promise is found."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline import audit
from tests.pipeline.conftest import Events, clean_log, last_json, write_events


def _audit(
    events: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    code = audit.run(["--events", str(events), *extra])
    lines = capsys.readouterr().out.strip().splitlines()
    return code, [json.loads(line) for line in lines[:-1]], last_json(lines[-1])


@pytest.mark.slow
def test_a_clean_log_passes(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, found, summary = _audit(write_events(tmp_path / "ev", clean_log().rows), capsys)
    assert (code, found) == (0, [])
    assert summary == {"messages": 6, "findings": 0, "by_kind": {}}


@pytest.mark.slow
def test_planted_breaches_are_found(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = clean_log()
    log.delivered("a", "m1", 61_060, 1_000, 61_000)  # a second delivery
    log.message("a", "early", 7_000, 100_000).delivered("a", "early", 90_000, 7_000, 100_000)
    log.delivered("a", "m4", 64_100, 4_000, 64_000)  # after its cancel at 5 000
    log.message("b", "stuck", 8_000, 10_000)  # due at 10 000, the log runs to 126 000
    log.message("b", "fine", 9_000, 100_000)  # due within the grace: not overdue yet
    log.delivered("b", "ghost", 50_000, 20_000, 20_000)  # created inside the log, never scheduled

    code, found, summary = _audit(write_events(tmp_path / "ev", log.rows), capsys)

    assert code == 1
    got = {(f["kind"], f["topic"], f["msg_id"]) for f in found}
    assert got == {
        ("duplicate_delivery", "a", "m1"),
        ("early_delivery", "a", "early"),
        ("delivered_after_cancel", "a", "m4"),
        ("overdue", "b", "stuck"),
        ("never_scheduled", "b", "ghost"),
    }
    early = next(f for f in found if f["kind"] == "early_delivery")
    assert early["early_by_ms"] == 10_000
    stuck = next(f for f in found if f["kind"] == "overdue")
    assert stuck["overdue_by_ms"] == 126_000 - 10_000
    assert summary["findings"] == 5
    assert summary["by_kind"]["early_delivery"] == 1


def _two_partitions(data_dir: Path, p0: Events, p1: Events) -> Path:
    """A partitioned data dir's logs: p0's segment without the partition column (sealed
    before it existed), p1's with it; each partition numbers its own seqs from 1."""
    write_events(data_dir / "p0" / "events", p0.rows)
    write_events(data_dir / "p1" / "events", p1.rows, partition=1)
    return data_dir


@pytest.mark.slow
def test_a_data_dir_is_audited_across_its_partitions(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same DLQ topic and msg_id in two partitions are two messages, each delivered
    once; a breach in either partition's log is found."""
    p0, p1 = Events(), Events()
    p0.message("%DLQ%g", "x", 1_000, 2_000).delivered("%DLQ%g", "x", 2_010, 1_000, 2_000)
    p0.message("a", "late", 1_000, 5_000)  # never delivered: overdue by the log's end
    p1.message("%DLQ%g", "x", 1_000, 2_000).delivered("%DLQ%g", "x", 2_020, 1_000, 2_000)
    p1.message("b", "m", 1_000, 90_000).add("cancelled", 1_500, "b", "m")
    p1.delivered("b", "m", 90_000, 1_000, 90_000)  # after its cancel, in partition 1
    data_dir = _two_partitions(tmp_path / "data", p0, p1)

    code, found, summary = _audit(data_dir, capsys, "--grace-ms", "1000")

    assert code == 1
    assert {(f["kind"], f["topic"], f["msg_id"]) for f in found} == {
        ("overdue", "a", "late"),
        ("delivered_after_cancel", "b", "m"),
    }
    assert summary["messages"] == 4


@pytest.mark.slow
def test_a_one_partition_data_dir_reads_its_events_dir(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_events(tmp_path / "data" / "events", clean_log().rows)
    code, found, summary = _audit(tmp_path / "data", capsys)
    assert (code, found, summary["messages"]) == (0, [], 6)
