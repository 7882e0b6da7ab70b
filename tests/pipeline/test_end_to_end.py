"""End to end: bulk load into a real server, let it deliver, consume, and run
report and audit on the event segments the server itself sealed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow.dataset as ds
import pytest

from pipeline import audit, bulk_load, report
from tests.e2e.conftest import receive_all
from tests.pipeline.conftest import last_json
from tests.support.server import Server

SEAL_MS = "200"  # the exporter seals every 200 ms here (10 s by default)
EXPORT_TIMEOUT_S = 60.0


def _sealed(events: Path) -> dict[str, int]:
    """Counts per kind in the sealed segments so far."""
    if not events.exists():
        return {}
    dataset = ds.dataset(events, format="parquet", exclude_invalid_files=True)
    if "kind" not in dataset.schema.names:  # a date folder, no segment sealed in it yet
        return {}
    table = dataset.to_table(["kind"])
    counts: dict[str, int] = {}
    for kind in table.column("kind").to_pylist():
        counts[kind] = counts.get(kind, 0) + 1
    return counts


@pytest.mark.slow
def test_load_deliver_report_and_audit_on_the_servers_own_events(
    spark: Any, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Server(tmp_path / "data", env={"ROCKTIMER_EVENTS_SEAL_MS": SEAL_MS}) as server:
        _run(server, topic, tmp_path, capsys)


def _run(server: Server, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    due = time.time_ns() // 1_000_000 + 2_000
    rows = [{"msg_id": f"burst-{i}", "body": f"b{i}", "deliver_at_ms": due} for i in range(20)]
    rows += [{"body": f"soon-{i}", "delay_ms": 1_000} for i in range(5)]
    rows += [{"body": "bad", "delay_level": 0}, {"body": "bad", "msg_id": "a b"}]
    path = tmp_path / "in.json"
    path.write_bytes(b"\n".join(orjson.dumps({"topic": topic, **r}) for r in rows))

    argv = ["--input", str(path), "--format", "json", "--rejects", str(tmp_path / "rej")]
    assert bulk_load.run([*argv, "--url", server.url]) == 0
    loaded = last_json(capsys.readouterr().out)
    assert (loaded["loaded"], loaded["rejected"]) == (25, 2)

    with httpx.Client(base_url=server.url, timeout=40) as client:
        assert len(receive_all(client, topic, "g", 25, timeout_s=60)) == 25
    events = tmp_path / "data" / "events"
    deadline = time.monotonic() + EXPORT_TIMEOUT_S
    while _sealed(events).get("acked", 0) < 25 and time.monotonic() < deadline:
        time.sleep(0.2)
    sealed = _sealed(events)
    assert (sealed["scheduled"], sealed["delivered"], sealed["acked"]) == (25, 25, 25)

    assert report.run(["--events", str(events), "--out", str(tmp_path / "report")]) == 0
    summary = last_json(capsys.readouterr().out)
    assert (summary["topics"], summary["delivered"], summary["dead"]) == (1, 25, 0)
    assert summary["lateness_ms"]["p50"] is not None
    assert summary["lateness_ms"]["p50"] >= 0

    code = audit.run(["--events", str(events), "--input", str(path), "--format", "json"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert (code, last_json(lines[-1])) == (0, {"messages": 25, "findings": 0, "by_kind": {}})


@pytest.mark.slow
def test_a_msg_id_reused_after_retention_is_a_new_message_not_a_duplicate(
    spark: Any, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With 1 s retention, a delivered message is swept and its msg_id is free again: a
    second load of the same file creates the messages anew (bulk_load says so: loaded, not
    already present), and audit sees two messages per id, each delivered once."""
    env = {
        "ROCKTIMER_EVENTS_SEAL_MS": SEAL_MS,
        "ROCKTIMER_RETENTION_MS": "1000",
        "ROCKTIMER_SWEEP_INTERVAL_MS": "100",
    }
    ids = [f"again-{i}" for i in range(3)]
    path = tmp_path / "in.json"
    path.write_bytes(
        b"\n".join(orjson.dumps({"topic": topic, "msg_id": i, "body": i}) for i in ids)
    )
    with Server(tmp_path / "data", env=env) as server:
        for run in (1, 2):
            argv = [
                "--input",
                str(path),
                "--format",
                "json",
                "--rejects",
                str(tmp_path / f"r{run}"),
            ]
            assert bulk_load.run([*argv, "--url", server.url]) == 0
            loaded = last_json(capsys.readouterr().out)
            assert (loaded["loaded"], loaded["already_present"]) == (3, 0), run
            deadline = time.monotonic() + EXPORT_TIMEOUT_S
            while time.monotonic() < deadline and any(
                httpx.get(f"{server.url}/v1/topics/{topic}/messages/{i}").status_code != 404
                for i in ids
            ):
                time.sleep(0.2)  # delivered at once, then swept by retention
        events = tmp_path / "data" / "events"
        deadline = time.monotonic() + EXPORT_TIMEOUT_S
        while _sealed(events).get("delivered", 0) < 6 and time.monotonic() < deadline:
            time.sleep(0.2)
    assert _sealed(events)["delivered"] == 6

    code = audit.run(["--events", str(events)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert (code, last_json(lines[-1])) == (0, {"messages": 6, "findings": 0, "by_kind": {}})
