"""The jobs on Spark's multi-process local cluster (``local-cluster[2,1,1024]``: a master,
two workers and executors in JVMs of their own): nothing may depend on state only the
driver has (its disk through pathlib, its environment, objects that do not pickle)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from tests.pipeline.conftest import clean_log, last_json, write_events
from tests.support.server import Server

MASTER = "local-cluster[2,1,1024]"
JOB_TIMEOUT_S = 900  # a cluster of three JVMs starts in seconds, minutes on a busy machine


def _job(*argv: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", *argv, "--master", MASTER],
        check=False,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return last_json(done.stdout)


@pytest.mark.slow
def test_bulk_load_report_and_audit_on_a_local_cluster(
    service: Server, topic: str, tmp_path: Path
) -> None:
    rows = [
        {"topic": topic, "msg_id": f"c-{i}", "body": f"b{i}", "delay_ms": 3_600_000}
        for i in range(40)
    ]
    rows.append({"topic": topic, "msg_id": "bad id", "body": "x"})
    path = tmp_path / "in.json"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    rejects = tmp_path / "rejects"

    loaded = _job(
        "pipeline.bulk_load",
        "--input",
        f"file://{path}",
        "--format",
        "json",
        "--rejects",
        f"file://{rejects}",
        "--url",
        service.url,
    )

    assert (loaded["rows"], loaded["loaded"], loaded["rejected"]) == (41, 40, 1)
    lines = [line for f in rejects.glob("part-*") for line in f.read_bytes().splitlines()]
    assert [orjson.loads(line)["msg_id"] for line in lines] == ["bad id"]

    events = write_events(tmp_path / "events", clean_log().rows)
    out = tmp_path / "report"
    summary = _job("pipeline.report", "--events", f"file://{events}", "--out", f"file://{out}")
    assert (summary["events"], summary["delivered"]) == (20, 5)
    assert pq.read_table(out / "by_topic.parquet").num_rows == 2
    assert (out / "report.html").exists()

    audited = _job("pipeline.audit", "--events", f"file://{events}")
    assert audited == {"messages": 6, "findings": 0, "by_kind": {}}
