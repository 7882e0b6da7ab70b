"""pipeline.audit: a clean log passes; each planted breach of a promise is found."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline import audit
from tests.pipeline.conftest import clean_log, last_json, write_events


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
