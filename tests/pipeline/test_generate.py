"""pipeline.generate: rows built in Spark SQL, the same on any number of partitions, and
its count of invalid rows is what bulk_load's checks (the service's own) reject."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from app.config import Settings
from pipeline import generate
from pipeline.rows import Reject, to_message
from tests.pipeline.conftest import last_json

START_MS = 1_800_000_000_000


def _rows(spark: Any, partitions: int) -> list[dict[str, Any]]:
    df, _bad = generate.rows_frame(spark, 3_000, 7, 4, 0.1, START_MS, False, partitions)
    return [r.asDict() for r in df.collect()]


@pytest.mark.slow
def test_rows_are_a_function_of_seed_and_index(spark: Any) -> None:
    one, three = _rows(spark, 1), _rows(spark, 3)
    assert one == three
    topics = Counter(r["topic"] for r in one)
    assert set(topics) <= {f"topic-{k}" for k in range(4)} | {"bad topic!"}
    repeats = sum(a == b for a, b in itertools.pairwise(one))
    assert 20 <= repeats <= 120  # about 2 % repeat the row before them
    schedules = Counter(
        next((k for k in ("deliver_at_ms", "delay_ms", "delay_level", "deliver_at") if r[k]), None)
        for r in one
    )
    assert all(
        schedules[k] > 100 for k in ("deliver_at_ms", "delay_ms", "delay_level", "deliver_at")
    )


@pytest.mark.slow
def test_the_invalid_count_is_what_the_services_checks_reject(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rows"
    argv = ["--rows", "2000", "--out", str(out), "--format", "parquet", "--invalid-fraction", "0.2"]
    argv += ["--master", "local[1]"]
    assert generate.run(argv) == 0
    summary = last_json(capsys.readouterr().out)

    table = pq.read_table(out)
    assert table.num_rows == summary["rows"] == 2000
    settings, now_ms = Settings(), time.time_ns() // 1_000_000
    reasons: Counter[str] = Counter()
    for row in table.to_pylist():
        if row["properties"] is not None:
            row["properties"] = dict(row["properties"])
        result = to_message(row, now_ms, settings)
        if isinstance(result, Reject):
            reasons[result.field] += 1
    assert sum(reasons.values()) == summary["invalid"]
    assert 300 <= summary["invalid"] <= 500
    assert set(reasons) == {
        "msg_id",
        "topic",
        "delay_level",
        "delay_ms",
        "timezone",
        "body",
        "deliver_at_ms",
        "deliver_at",
    }
