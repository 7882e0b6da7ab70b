"""pipeline.bulk_load into a real server: exact rejects, no duplicates on a second run or
a retried task, local times across a DST change, and one-line errors."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow as pa
import pytest

from app.config import Settings
from app.defaults import MAX_BATCH
from pipeline import bulk_load, cli
from pipeline.rows import COLUMNS, Reject, local_to_ms
from pipeline.sender import BatchSender, results_of
from tests.pipeline.conftest import last_json
from tests.support.server import Server

HOUR_MS = 3_600_000


def _csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _load(
    server: Server, path: Path, fmt: str, rejects: Path, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    argv = ["--input", str(path), "--format", fmt, "--rejects", str(rejects), "--url", server.url]
    assert bulk_load.run(argv) == 0
    return last_json(capsys.readouterr().out)


def _rejects(directory: Path) -> dict[str, tuple[str, str]]:
    """body → (reject_field, reject_reason) of every reject line."""
    lines = [
        orjson.loads(line)
        for f in sorted(directory.glob("part-*"))
        for line in f.read_bytes().splitlines()
    ]
    return {line["body"]: (line["reject_field"], line["reject_reason"]) for line in lines}


def _pending(server: Server) -> int:
    """The server's pending timers (tests run one at a time: only this test adds any)."""
    pending: int = httpx.get(f"{server.url}/readyz").json()["pending_timers"]
    return pending


@pytest.mark.slow
def test_rejects_are_exactly_the_invalid_rows_and_a_second_run_adds_nothing(
    spark: Any, service: Server, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    soon = time.time_ns() // 1_000_000 + HOUR_MS
    gone = httpx.post(
        f"{service.url}/v1/topics/{topic}/messages",
        json={"msg_id": "gone", "body": "x", "delay_ms": HOUR_MS},
    )
    assert gone.status_code == 201
    assert httpx.delete(f"{service.url}/v1/topics/{topic}/messages/gone").status_code == 200
    valid: list[dict[str, Any]] = [
        {"msg_id": "ok-1", "body": "ok-1", "delay_ms": HOUR_MS},
        {"body": "ok-2", "deliver_at_ms": soon},
        {"body": "ok-2", "deliver_at_ms": soon},  # the same row twice: two messages
        {"body": "ok-3", "delay_level": 18, "properties": '{"a": "b"}', "tag": "email"},
        {"body": "ok-4", "deliver_at": "2027-03-14T09:00:00", "timezone": "America/New_York"},
        {"msg_id": "ok-1", "body": "ok-1", "delay_ms": HOUR_MS},  # a verbatim repeat
    ]
    invalid: dict[str, dict[str, Any]] = {  # body → the field it is rejected on
        "bad-msg-id": {"msg_id": "bad id"},
        "bad-topic": {"topic": "bad topic!"},
        "bad-two": {"deliver_at_ms": soon, "delay_ms": 5},
        "bad-level": {"delay_level": 99},
        "bad-zone": {"deliver_at": "2027-01-01T09:00:00", "timezone": "Mars/Olympus_Mons"},
        "bad-base64": {"body_encoding": "base64"},
        "bad-properties": {"properties": "[1]"},
        "bad-delay": {"delay_ms": "soon"},
        "bad-local": {"deliver_at": "2027-01-01T09:00:00"},
        "bad-far": {"deliver_at_ms": soon + 20 * 366 * 24 * HOUR_MS},
        "bad-encoding": {"body_encoding": "utf16"},
        "bad-cancelled": {"msg_id": "gone"},
    }
    expected_field = {
        "bad-msg-id": "msg_id",
        "bad-topic": "topic",
        "bad-two": "delay_ms",
        "bad-level": "delay_level",
        "bad-zone": "timezone",
        "bad-base64": "body",
        "bad-properties": "properties",
        "bad-delay": "delay_ms",
        "bad-local": "timezone",
        "bad-far": "deliver_at_ms",
        "bad-encoding": "body_encoding",
        "bad-cancelled": "msg_id",
    }
    rows = [{"topic": topic, **row} for row in valid]
    rows += [{"topic": topic, "body": body, **fields} for body, fields in invalid.items()]
    path = _csv(tmp_path / "in.csv", rows)
    before = _pending(service)

    first = _load(service, path, "csv", tmp_path / "rejects", capsys)

    assert (first["rows"], first["loaded"], first["already_present"], first["rejected"]) == (
        18,
        5,
        1,
        12,
    )
    got = _rejects(tmp_path / "rejects")
    assert {body: field for body, (field, _) in got.items()} == expected_field
    assert "409" in got["bad-cancelled"][1]
    assert got["bad-level"][1] == "Input should be less than or equal to 18"
    assert sum(first["by_reason"].values()) == 12
    assert _pending(service) == before + 5

    second = _load(service, path, "csv", tmp_path / "rejects2", capsys)

    assert (second["loaded"], second["already_present"], second["rejected"]) == (0, 6, 12)
    assert _pending(service) == before + 5


def test_a_retried_task_creates_no_duplicates(service: Server, topic: str) -> None:
    """What Spark does on a task retry: the same partition through the same function."""
    rows = [
        {"topic": topic, "body": f"retry-{i}", "delay_ms": HOUR_MS, bulk_load.ORDINAL: 0}
        for i in range(30)
    ]
    target = bulk_load.Target(service.url, None, Settings())

    def attempt() -> dict[str, int]:
        out = list(bulk_load.load_partition(target, iter([pa.RecordBatch.from_pylist(rows)])))
        totals: dict[str, int] = {}
        for batch in out:
            for r in batch.to_pylist():
                totals[r["kind"]] = totals.get(r["kind"], 0) + r["count"]
        return totals

    before = _pending(service)
    assert attempt() == {"loaded": 30}
    assert attempt() == {"already_present": 30}
    assert _pending(service) == before + 30


@pytest.mark.slow
def test_local_times_land_at_the_right_instant_across_dst(
    spark: Any, service: Server, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = {  # msg_id → (local time, zone, the UTC instant)
        "ny-before": ("2027-03-14T01:30:00", "America/New_York", "2027-03-14T06:30:00"),
        "ny-gap": ("2027-03-14T02:30:00", "America/New_York", "2027-03-14T07:30:00"),
        "ny-after": ("2027-03-14T09:00:00", "America/New_York", "2027-03-14T13:00:00"),
        "ny-overlap": ("2027-11-07T01:30:00", "America/New_York", "2027-11-07T05:30:00"),
        "berlin-summer": ("2027-03-28T09:00:00", "Europe/Berlin", "2027-03-28T07:00:00"),
        "sydney": ("2027-04-04T09:00:00", "Australia/Sydney", "2027-04-03T23:00:00"),
        "offset": ("2027-03-14T09:00:00-04:00", "", "2027-03-14T13:00:00"),
    }
    rows = [
        {"msg_id": msg_id, "body": msg_id, "deliver_at": local, "timezone": zone or None}
        for msg_id, (local, zone, _) in cases.items()
    ]
    path = tmp_path / "in.json"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    argv = [
        "--input",
        str(path),
        "--format",
        "json",
        "--rejects",
        str(tmp_path / "rej"),
        "--url",
        service.url,
        "--topic",
        topic,
    ]
    assert bulk_load.run(argv) == 0
    assert last_json(capsys.readouterr().out)["loaded"] == len(cases)
    for msg_id, (_, _, utc) in cases.items():
        got = httpx.get(f"{service.url}/v1/topics/{topic}/messages/{msg_id}").json()
        assert got["deliver_at_ms"] == local_to_ms(utc + "+00:00", None), msg_id


@pytest.mark.parametrize(
    ("text", "zone", "expected"),
    [
        ("2027-03-14T02:30:00", "America/New_York", local_to_ms("2027-03-14T07:30:00+00:00", None)),
        ("2027-03-14T02:30:00", "", Reject("timezone", "missing: deliver_at is a local time")),
        (
            "2027-03-14T02:30:00Z",
            "UTC",
            Reject("timezone", "deliver_at already has a UTC offset; give one or the other"),
        ),
        ("14/03/2027", "UTC", Reject("deliver_at", "not an ISO-8601 date-time: '14/03/2027'")),
        (
            "2027-03-14T02:30:00",
            "Nowhere/City",
            Reject("timezone", "unknown time zone 'Nowhere/City'"),
        ),
    ],
)
def test_local_to_ms(text: str, zone: str, expected: int | Reject) -> None:
    assert local_to_ms(text, zone) == expected


def test_unknown_column_is_a_one_line_error(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_text('{"body": "x", "topic": "t", "delay": 5}\n')
    with pytest.raises(cli.JobError, match="unknown column"):
        bulk_load.prepare(bulk_load.read_input(spark, str(path), "json"), None)


@pytest.mark.parametrize(
    "argv",
    [
        [
            "pipeline.bulk_load",
            "--input",
            "/no/such/file",
            "--format",
            "csv",
            "--rejects",
            "/tmp/x",
        ],
        ["pipeline.bulk_load", "--input", "/tmp", "--format", "xml", "--rejects", "/tmp/x"],
        ["pipeline.report", "--events", "/no/such/dir", "--out", "/tmp/x"],
        ["pipeline.audit", "--events", "/no/such/dir"],
        ["pipeline.generate", "--rows", "-3", "--out", "/tmp/x", "--format", "csv"],
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", *argv], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: ")
    assert done.stdout == ""


def test_an_unreachable_service_is_a_one_line_error(tmp_path: Path) -> None:
    path = _csv(tmp_path / "in.csv", [{"topic": "t", "body": "x"}])
    with pytest.raises(cli.JobError, match="cannot reach the service"):
        bulk_load.preflight("http://127.0.0.1:9", None)
    assert path.exists()


def test_the_sender_honours_retry_after_and_backs_off() -> None:
    """Against a tiny local server that answers 503 (Retry-After: 2), then drops, then 200."""
    import http.server
    import threading

    answers = [(503, {"Retry-After": "2"}), (None, {}), (200, {})]
    seen: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            status, headers = answers[len(seen)]
            seen.append(1)
            if status is None:
                self.connection.close()
                return
            body = b'{"results":[{"index":0,"status":201}]}' if status == 200 else b"{}"
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    slept: list[float] = []
    try:
        sender = BatchSender(f"http://127.0.0.1:{httpd.server_address[1]}", "k", sleep=slept.append)
        assert results_of(sender.post("t", [b'{"body":"x"}'])) == [{"index": 0, "status": 201}]
        sender.close()
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert slept[0] == 2.0
    assert 1.28 <= slept[1] <= 1.92  # the second failure in a row: 1.6 s ± 20 %
    assert len(seen) == 3


@pytest.mark.parametrize(
    ("attempt", "low", "high"),
    [(1, 0.8, 1.2), (2, 1.28, 1.92), (5, 5.24, 7.87), (30, 96.0, 144.0)],
)
def test_backoff_grows_by_1_6_up_to_the_cap(attempt: int, low: float, high: float) -> None:
    import random

    from pipeline.sender import backoff_s

    rng = random.Random(attempt)
    assert all(low <= backoff_s(attempt, rng) <= high for _ in range(100))


def test_a_task_has_its_batches_on_their_way_at_once() -> None:
    """The task checks rows while the service works on its batches: a local server answers
    only once IN_FLIGHT (4) requests are in at the same time (a task with fewer on their
    way would time out here and be refused)."""
    import http.server
    import threading

    both_in = threading.Barrier(bulk_load.IN_FLIGHT, timeout=5)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            n = len(orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))["messages"])
            try:
                both_in.wait()
                status, body = 200, orjson.dumps({"results": [{"status": 201}] * n})
            except threading.BrokenBarrierError:
                status, body = 400, b'{"detail": "one request at a time"}'
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    assert bulk_load.IN_FLIGHT >= 4
    n = bulk_load.IN_FLIGHT * MAX_BATCH
    rows = [{"topic": "t", "body": f"b{i}", "delay_ms": HOUR_MS} for i in range(n)]
    target = bulk_load.Target(f"http://127.0.0.1:{httpd.server_address[1]}", None, Settings())
    try:
        out = list(bulk_load.load_partition(target, iter([pa.RecordBatch.from_pylist(rows)])))
    finally:
        httpd.shutdown()
        httpd.server_close()
    totals = [(r["kind"], r["count"]) for batch in out for r in batch.to_pylist()]
    assert totals == [("loaded", n)]


def _lines(directory: Path) -> list[dict[str, Any]]:
    return [
        orjson.loads(line)
        for f in sorted(directory.glob("part-*"))
        for line in f.read_bytes().splitlines()
    ]


def _status(server: Server, topic: str, msg_id: str) -> int:
    return httpx.get(f"{server.url}/v1/topics/{topic}/messages/{msg_id}").status_code


@pytest.mark.slow
def test_a_row_no_check_foresaw_is_a_reject_and_the_others_load(
    spark: Any, service: Server, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Zones that are tzdata directories and local times whose UTC instant falls outside
    datetime's years end one row each, not the job."""
    rows: list[dict[str, Any]] = [
        {"msg_id": "ok-1", "body": "ok-1", "delay_ms": HOUR_MS},
        {"msg_id": "dir", "body": "dir", "deliver_at": "2027-01-01T09:00", "timezone": "Europe"},
        {
            "msg_id": "cache",
            "body": "cache",
            "deliver_at": "2027-01-01T09:00",
            "timezone": "__pycache__",
        },
        {
            "msg_id": "year1",
            "body": "year1",
            "deliver_at": "0001-01-01T00:00",
            "timezone": "Asia/Tokyo",
        },
        {
            "msg_id": "year9999",
            "body": "year9999",
            "deliver_at": "9999-12-31T23:59:59",
            "timezone": "America/New_York",
        },
        {"msg_id": "ok-2", "body": "ok-2", "delay_ms": HOUR_MS},
    ]
    path = _csv(tmp_path / "in.csv", [{"topic": topic, **row} for row in rows])

    summary = _load(service, path, "csv", tmp_path / "rejects", capsys)

    assert (summary["rows"], summary["loaded"], summary["rejected"]) == (6, 2, 4)
    got = _rejects(tmp_path / "rejects")
    assert got["dir"] == ("timezone", "unknown time zone 'Europe'")
    assert got["cache"] == ("timezone", "unknown time zone '__pycache__'")
    assert got["year1"] == ("deliver_at", "'0001-01-01T00:00' is outside the years 1-9999 in UTC")
    assert got["year9999"][0] == "deliver_at"
    assert _status(service, topic, "ok-1") == _status(service, topic, "ok-2") == 200


@pytest.mark.slow
def test_malformed_csv_lines_are_rejects_that_keep_the_line(
    spark: Any, service: Server, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "in.csv"
    path.write_text(
        "topic,msg_id,body,delay_ms\n"
        f"{topic},good,fine,{HOUR_MS}\n"
        f'{topic},open,"unclosed quote body,0\n'
        f"{topic},extra,body,{HOUR_MS},surplus\n"
        f"{topic},short,body\n"
        f'{topic},quoted,"a, b",{HOUR_MS}\n'
    )

    summary = _load(service, path, "csv", tmp_path / "rejects", capsys)

    assert (summary["rows"], summary["loaded"], summary["rejected"]) == (5, 2, 3)
    lines = {line["_corrupt_record"]: line for line in _lines(tmp_path / "rejects")}
    assert lines[f'{topic},open,"unclosed quote body,0'] == {
        "_corrupt_record": f'{topic},open,"unclosed quote body,0',
        "reject_field": "row",
        "reject_reason": "malformed CSV: unexpected end of data",
    }
    assert lines[f"{topic},extra,body,{HOUR_MS},surplus"]["reject_reason"] == (
        "malformed CSV: 5 fields, the header has 4"
    )
    assert (
        lines[f"{topic},short,body"]["reject_reason"] == "malformed CSV: 3 fields, the header has 4"
    )
    for msg_id in ("open", "extra", "short"):
        assert _status(service, topic, msg_id) == 404, msg_id
    assert _status(service, topic, "quoted") == 200


@pytest.mark.slow
def test_one_msg_id_with_two_contents_is_a_reject_naming_the_first_row(
    spark: Any, service: Server, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        {"msg_id": "other", "body": "x", "delay_ms": HOUR_MS},
        {"msg_id": "twice", "body": "first", "delay_ms": HOUR_MS},
        {"msg_id": "twice", "body": "second", "delay_ms": HOUR_MS},
        {"msg_id": "twice", "body": "first", "delay_ms": HOUR_MS},  # a verbatim repeat
    ]
    path = _csv(tmp_path / "in.csv", [{"topic": topic, **row} for row in rows])

    summary = _load(service, path, "csv", tmp_path / "rejects", capsys)

    assert (summary["loaded"], summary["already_present"], summary["rejected"]) == (2, 1, 1)
    assert _rejects(tmp_path / "rejects") == {
        "second": ("msg_id", "conflicts with row 2: same msg_id, other content")
    }
    assert summary["by_reason"] == {"msg_id: conflicts with row 2: same msg_id, other content": 1}


@pytest.mark.slow
def test_a_stored_msg_id_due_at_another_time_is_a_reject(
    spark: Any, service: Server, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    due = time.time_ns() // 1_000_000 + HOUR_MS
    for msg_id in ("same", "moved"):
        sent = httpx.post(
            f"{service.url}/v1/topics/{topic}/messages",
            json={"msg_id": msg_id, "body": msg_id, "deliver_at_ms": due},
        )
        assert sent.status_code == 201
    rows = [
        {"msg_id": "same", "body": "same", "deliver_at_ms": due},
        {"msg_id": "moved", "body": "moved", "deliver_at_ms": due + 1_000},
    ]
    path = _csv(tmp_path / "in.csv", [{"topic": topic, **row} for row in rows])

    summary = _load(service, path, "csv", tmp_path / "rejects", capsys)

    assert (summary["loaded"], summary["already_present"], summary["rejected"]) == (0, 1, 1)
    assert _rejects(tmp_path / "rejects") == {
        "moved": (
            "msg_id",
            f"differs from the stored message: due at {due}, this row at {due + 1_000} (200)",
        )
    }


def test_a_csv_named_parquet_is_a_one_line_error(tmp_path: Path) -> None:
    path = _csv(tmp_path / "rows.parquet", [{"topic": "t", "body": "x"}])
    argv = ["--input", str(path), "--format", "parquet", "--rejects", str(tmp_path / "r")]
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.bulk_load", *argv, "--url", "http://127.0.0.1:9"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"error: {path}: not a Parquet file (give its --format)\n"


def test_a_file_spark_cannot_read_as_parquet_is_a_job_error(spark: Any, tmp_path: Path) -> None:
    """Past the local check (a path on a cluster's file system): Spark's own error, as one
    line."""
    path = _csv(tmp_path / "rows.parquet", [{"topic": "t", "body": "x"}])
    with pytest.raises(cli.JobError, match=r"is not a Parquet file") as caught:
        bulk_load.spark_read(spark, str(path), "parquet")
    assert "\n" not in str(caught.value)


def test_local_spark_listens_on_loopback_only(spark: Any) -> None:
    """The driver, its block manager and the UI: no socket of the JVM on another address."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    listening = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                listening.append(fields[1].split(":")[0])
    loopback = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
    assert listening
    assert set(listening) <= loopback
    assert spark.conf.get("spark.driver.host") == "127.0.0.1"


# A job's session in a process of its own (its JVM starts with it): the collectors' names.
SESSION_COLLECTORS = (
    "from pipeline import cli\n"
    "spark = cli.session('local[1]', 'gc', streaming=True)\n"
    "jvm = spark.sparkContext._jvm\n"
    "beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()\n"
    "print(sorted(bean.getName() for bean in beans))\n"
    "flags = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()\n"
    "print(sorted(f for f in flags if f.startswith('-XX:Tier4')))\n"
    "spark.stop()\n"
)


@pytest.mark.parametrize(
    ("java_tool_options", "collectors"),
    [
        (None, ["Copy", "MarkSweepCompact"]),  # the serial collector
        ("-XX:+UseParallelGC", ["PS MarkSweep", "PS Scavenge"]),  # the one chosen, and it starts
    ],
)
def test_a_local_bulk_loads_jvm_is_set_for_streaming_and_keeps_a_chosen_collector(
    java_tool_options: str | None, collectors: list[str]
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in cli.JAVA_OPTION_VARIABLES}
    if java_tool_options:
        env["JAVA_TOOL_OPTIONS"] = java_tool_options
    done = subprocess.run(
        [sys.executable, "-c", SESSION_COLLECTORS],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    *_, got_collectors, got_jit = done.stdout.strip().splitlines()
    assert got_collectors == repr(collectors)
    assert got_jit == repr(sorted(cli.STREAMING_JIT))  # C2 for the hottest code only


@pytest.mark.parametrize(
    ("text", "zone", "field"),
    [
        ("2027-03-14T02:30:00", "Europe", "timezone"),
        ("2027-03-14T02:30:00", "America", "timezone"),
        ("2027-03-14T02:30:00", "a" * 300, "timezone"),
        ("0001-01-01T00:00", "Asia/Tokyo", "deliver_at"),
        ("9999-12-31T23:59:59", "America/New_York", "deliver_at"),
    ],
)
def test_local_to_ms_rejects_what_datetime_and_tzdata_refuse(
    text: str, zone: str, field: str
) -> None:
    got = local_to_ms(text, zone)
    assert isinstance(got, Reject)
    assert got.field == field


def test_paths_off_this_machine_are_sparks_to_check() -> None:
    """hdfs://, s3a:// and, on a cluster, a path without a scheme (the cluster's default
    file system) pass the argument check; a local path that is not there does not."""
    cli.require_path("hdfs://namenode/rows", directory=True)
    cli.require_path("s3a://bucket/rows")
    cli.require_path("/data/rows", master="spark://head:7077")
    cli.require_path("/data/rows", master="yarn")
    with pytest.raises(cli.JobError, match="no such file"):
        cli.require_path("/no/such/rows", master="local[2]")
    with pytest.raises(cli.JobError, match="no such directory"):
        cli.require_path("file:///no/such/events", directory=True)


def test_one_shuffle_keeps_each_msg_id_in_one_task_and_mixes_the_topics(spark: Any) -> None:
    """Four tasks a slot (local[1]: 4), even whatever the topics' sizes; every row of a
    msg_id (of identical id-less rows) in one task, numbered there; each task holds every
    topic, so its requests go to every partition of the service at once."""
    from pyspark.sql import functions as sf

    rows = [("big", f"m{i % 300}", f"b{i}") for i in range(600)]  # rows 301-600 conflict
    rows += [("s1", "", f"twice-{i // 2}") for i in range(200)]  # pairs without a msg_id
    rows += [(t, f"{t}-{i}", "x") for t, n in (("s2", 120), ("s3", 80)) for i in range(n)]
    df = spark.createDataFrame(rows, "topic string, msg_id string, body string").coalesce(1)

    laid = bulk_load.prepare(df, None, bulk_load.TASKS_PER_SLOT)
    out = laid.mapInArrow(bulk_load.numbered, bulk_load.numbered_schema(laid.schema))

    assert out.rdd.getNumPartitions() == bulk_load.TASKS_PER_SLOT
    task = sf.spark_partition_id().alias("task")
    got = out.select(task, "topic", "msg_id", "body", bulk_load.ORDINAL, bulk_load.CONFLICT)
    got_rows = got.collect()
    per_task: dict[int, int] = {}
    tasks_of_id: dict[tuple[str, str], set[int]] = {}
    topics_of_task: dict[int, set[str]] = {}
    for r in got_rows:
        per_task[r.task] = per_task.get(r.task, 0) + 1
        tasks_of_id.setdefault((r.topic, r.msg_id), set()).add(r.task)
        topics_of_task.setdefault(r.task, set()).add(r.topic)
    assert sum(per_task.values()) == 1000
    assert all(190 <= n <= 310 for n in per_task.values()), per_task
    assert all(len(tasks) == 1 for key, tasks in tasks_of_id.items() if key[1]), tasks_of_id
    assert all(t == {"big", "s1", "s2", "s3"} for t in topics_of_task.values()), topics_of_task
    conflicts = {r.body: r[bulk_load.CONFLICT] for r in got_rows if r.topic == "big"}
    # A conflict names the first row's place; its number only when a load has conflicts.
    assert conflicts == {f"b{i}": (i - 300 if i >= 300 else None) for i in range(600)}
    before = bulk_load.place_offsets(df)
    assert [bulk_load.row_number(p, before) for p in (0, 299, 599)] == [1, 300, 600]
    ordinals: dict[str, list[int]] = {}
    for r in got_rows:
        if r.topic == "s1":
            ordinals.setdefault(r.body, []).append(r[bulk_load.ORDINAL])
    assert all(sorted(o) == [0, 1] for o in ordinals.values()), ordinals
    assert {r[bulk_load.ORDINAL] for r in got_rows if r.topic != "s1"} == {0}


@pytest.mark.slow
def test_requests_are_sized_by_the_services_limits(
    spark: Any,
    fresh_server: Callable[..., Server],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A service that takes 100 kB a request and 1 kB a body: the loader's batches fit it
    (sized by the driver's defaults they would be refused whole, 413) and an over-long body
    is refused in the executor in the service's words."""
    server = fresh_server(ROCKTIMER_MAX_REQUEST_BYTES="100000", ROCKTIMER_MAX_BODY_BYTES="1000")
    rows = [{"topic": "sized", "body": f"{i:0>200}", "delay_ms": HOUR_MS} for i in range(1500)]
    rows.append({"topic": "sized", "msg_id": "long", "body": "x" * 1001, "delay_ms": HOUR_MS})
    path = _csv(tmp_path / "in.csv", rows)

    summary = _load(server, path, "csv", tmp_path / "rejects", capsys)

    assert (summary["loaded"], summary["rejected"]) == (1500, 1)
    assert _rejects(tmp_path / "rejects")["x" * 1001] == (
        "body",
        "1001 bytes, over the 1000 limit",
    )


def test_a_conflicts_place_becomes_the_same_row_number_in_the_summary_and_the_rejects(
    spark: Any,
) -> None:
    """The summary's reasons (on the driver) and the rejects' (a Spark column) number a
    place alike, across the input's partitions."""
    before = {0: 0, 1: 5}
    places = (3, (1 << 33) + 2)  # the 4th row of the first partition, the 3rd of the second
    reasons = [
        bulk_load.CONFLICT_REASON.format(row=f"{bulk_load.PLACE}{p}{bulk_load.PLACE}")
        for p in places
    ]
    reasons.append("msg_id: other")
    df = spark.createDataFrame([(r,) for r in reasons], "reason string")

    column = df.select(bulk_load.numbered_column(df["reason"], before)).collect()

    expected = [bulk_load.CONFLICT_REASON.format(row=n) for n in (4, 8)] + ["msg_id: other"]
    assert [bulk_load.numbered_reason(r, before) for r in reasons] == expected
    assert [r[0] for r in column] == expected


@pytest.mark.slow
def test_a_file_without_a_msg_id_column_loads(
    spark: Any, service: Server, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No msg_id column: every row's id is its content's, two identical rows two messages."""
    path = tmp_path / "in.csv"
    rows = "".join(f"{topic},{body},{HOUR_MS}\n" for body in ("same", "same", "other"))
    path.write_text(f"topic,body,delay_ms\n{rows}")
    before = _pending(service)

    summary = _load(service, path, "csv", tmp_path / "rejects", capsys)

    assert (summary["rows"], summary["loaded"], summary["rejected"]) == (3, 3, 0)
    assert _pending(service) == before + 3


def _laid_out(rows: list[tuple[int, str | None, str | None, int, int]]) -> pa.RecordBatch:
    """Rows as ``number`` lays them out: (bucket, topic, key, place, digest) each."""
    bucket, topic, key, place, digest = zip(*rows, strict=True)
    return pa.RecordBatch.from_pydict(
        {
            "topic": pa.array(topic, pa.string()),
            "body": pa.array([f"r{i}" for i in range(len(rows))], pa.string()),
            bulk_load.NUMBERING[0]: pa.array(place, pa.int64()),
            bulk_load.NUMBERING[1]: pa.array(digest, pa.int64()),
            bulk_load.NUMBERING[2]: pa.array(key, pa.string()),
            bulk_load.NUMBERING[3]: pa.array(bucket, pa.int64()),
        }
    )


def test_numbered_follows_a_key_across_batches() -> None:
    """A key's first row decides, wherever the task's batches cut its rows: a msg_id with
    other content than its first row's conflicts with that row's place; copies without a
    msg_id are ranked; a refused id (no key) and another key of the same hash are not."""
    copy = bulk_load.CONTENT_KEY + "77"
    batches = [
        _laid_out([(1, "t", "a", 10, 5), (2, "t", "b", 3, 6), (2, "t", "b", 4, 6)]),
        _laid_out([(2, "t", "b", 9, 8), (2, "t", copy, 1, 7), (2, "t", copy, 2, 7)]),
        _laid_out([(2, "t", copy, 8, 7), (5, "t", None, 0, 1), (5, "t", None, 6, 2)]),
        _laid_out([(5, "u", None, 7, 3), (6, "t", "c", 11, 4)]),
        _laid_out([(6, "t", "c", 12, 9), (6, "t", "c", 13, 4)]),
    ]
    out = list(bulk_load.numbered(iter(batches)))
    assert [b.schema.names for b in out] == [
        ["topic", "body", bulk_load.ORDINAL, bulk_load.CONFLICT]
    ] * len(batches)
    got = [(row[bulk_load.ORDINAL], row[bulk_load.CONFLICT]) for b in out for row in b.to_pylist()]
    assert got == [
        (0, None),  # a
        (0, None),  # b's first row
        (0, None),  # b, the same content
        (0, 3),  # b, other content, in the next batch: row 3's
        (0, None),  # the first copy
        (1, None),
        (2, None),  # the third copy, in the next batch
        (0, None),  # refused ids, same topic and hash
        (0, None),
        (0, None),  # another topic in the same hash
        (0, None),  # c, its rows in the next batch
        (0, 11),
        (0, None),
    ]


def test_the_numbering_is_one_shuffle_and_a_sort_without_a_window(spark: Any) -> None:
    """No window over each key (a million keys, a million windows' buffers): the layout's
    sort puts a key's rows together, first row first, for ``numbered``."""
    df = spark.createDataFrame([("t", "m", "b")], "topic string, msg_id string, body string")
    plan = bulk_load.prepare(df, None, 2)._jdf.queryExecution().executedPlan().toString()
    assert "Window" not in plan
    assert plan.count("Exchange") == 1
    assert "Sort [" in plan
