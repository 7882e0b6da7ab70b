"""``rocktimer`` against a real server: each command's output, --json and exit codes.

Commands run in-process through ``cli.main.main`` (the console script's own entry point,
so one-line errors and exit codes are the real ones); a few run the installed console
script as a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.defaults import MAX_BATCH
from bench.process import START_TIMEOUT_S, free_port
from cli.connection import Exit
from cli.main import main
from tests.e2e.server import Server

ROCKTIMER = Path(sys.executable).parent / "rocktimer"


class Run:
    """``rocktimer --url <server> ARGS`` in-process: exit code, stdout, stderr."""

    def __init__(self, url: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.url, self.capsys = url, capsys

    def __call__(self, *args: str, code: int = Exit.OK) -> tuple[str, str]:
        got = main(["--url", self.url, *args])
        out, err = self.capsys.readouterr()
        assert got == code, f"rocktimer {' '.join(args)} exited {got}: {out}{err}"
        return out, err

    def json(self, *args: str, code: int = Exit.OK) -> list[Any]:
        out, _ = self(*args, "--json", code=code)
        return [json.loads(line) for line in out.splitlines()]


@pytest.fixture
def run(server: Server, capsys: pytest.CaptureFixture[str]) -> Run:
    return Run(server.url, capsys)


def test_send_status_cancel(run: Run, topic: str) -> None:
    out, _ = run("send", topic, "charge card", "--id", "o1", "--delay", "1h", "--prop", "k=v")
    assert out.startswith(f"scheduled: {topic}/o1 for ")
    assert "(in 59 min" in out
    (again,) = run.json("send", topic, "other", "--id", "o1")
    assert again["created"] is False

    (view,) = run.json("status", topic, "o1")
    assert (view["state"], view["properties"]) == ("scheduled", {"k": "v"})
    out, _ = run("status", topic, "o1")
    assert "scheduled" in out
    assert "k=v" in out

    out, _ = run("cancel", topic, "o1")
    assert out == f"cancelled: {topic}/o1\n"
    (problem,) = run.json("send", topic, "x", "--id", "o1", code=Exit.REFUSED)
    assert problem["status"] == 409
    _, err = run("status", topic, "nope", code=Exit.REFUSED)
    assert err == f"rocktimer: 404 Not Found: no message 'nope' in topic '{topic}'\n"


def test_usage_errors_are_one_line(run: Run, topic: str) -> None:
    for args, flag in (
        (["send", topic, "x", "--bogus"], "--bogus"),
        (["send", topic, "x", "--delay", "5 parsecs"], "--delay"),
        (["send", topic, "x", "--delay", "1s", "--level", "3"], "--level"),
        (["settings", topic, "g", "--retry", "fixed", "--initial", "1s"], "--initial"),
        (["dlq", "redrive", topic, "g"], "--all"),
    ):
        _, err = run(*args, code=Exit.USAGE)
        assert err.count("\n") == 1, err
        assert flag in err
    _, err = run("send", "bad topic!", "x", code=Exit.USAGE)  # the server's 422
    assert err.startswith("rocktimer: 422 Unprocessable Content: topic:")


def test_batch_jsonl_and_csv(run: Run, topic: str, tmp_path: Path) -> None:
    lines = [
        json.dumps({"body": f"m{i}", "msg_id": f"m{i}", "delay_ms": 60_000}) for i in range(1500)
    ]
    lines[3] = "not json"
    lines[7] = json.dumps({"body": "x", "dely_ms": 5})
    lines[9] = json.dumps({"body": "x", "delay_level": 99})
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    out, err = run("batch", topic, str(jsonl), code=Exit.REFUSED)  # 2 requests of <= 1000
    assert "1500 messages: 1497 scheduled, 0 already there, 3 failed" in out
    assert "line 4: 422 not JSON" in err
    assert "line 8: 422 unknown field 'dely_ms'" in err
    assert "line 10: 422 delay_level: Input should be less than or equal to 18" in err
    assert MAX_BATCH < 1500
    assert run.json("status", topic, "m1499")[0]["state"] == "scheduled"

    csv = tmp_path / "in.csv"
    csv.write_text("body,msg_id,delay_level,properties.region\nhello,c1,3,eu\nagain,m0,,\n")
    results = run.json("batch", topic, str(csv))
    assert results == [
        {"line": 2, "status": 201, "msg_id": "c1"},
        {"line": 3, "status": 200, "msg_id": "m0"},
    ]
    assert run.json("status", topic, "c1")[0]["properties"] == {"region": "eu"}


def test_tail_settings_dead_letters(run: Run, topic: str, server: Server) -> None:
    for i in range(3):
        run("send", topic, f"job {i}", "--id", f"j{i}", "--tag", "T")
    got = run.json("tail", topic, "g", "--count", "2", "--wait", "5s")
    assert [m["attempt"] for m in got] == [1, 1]
    assert run.json("status", topic, got[0]["msg_id"], "--group", "g")[0]["state"] == "acked"
    out, _ = run("tail", topic, "g", "--count", "1", "--no-ack")
    (last,) = {"j0", "j1", "j2"} - {m["msg_id"] for m in got}
    assert f" UTC {last} " in out
    assert out.endswith(f"  tag T  job {last[1]}\n")  # after the lateness
    assert run.json("status", topic, last, "--group", "g")[0]["state"] == "inflight"

    out, _ = run("settings", topic, "g")
    assert out.split() == ["max_attempts", "16", "filter", "*", "retry", "levels"]
    run("settings", topic, "g", "--filter", "T || U")
    (changed,) = run.json("settings", topic, "g", "--max-attempts", "1", "--retry", "fixed")
    assert changed == {
        "max_attempts": 1,
        "filter": "T || U",  # kept: only what the options name changes
        "retry": "fixed",
        "retry.interval_ms": 10_000,
    }
    with httpx.Client(base_url=server.url) as http:
        push = {"url": "http://127.0.0.1:9/hook", "secret": "s"}
        assert http.put(f"/v1/topics/{topic}/groups/p", json={"push": push}).status_code == 200
    (pushed,) = run.json("settings", topic, "p")
    assert (pushed["push.url"], pushed["push.max_in_flight"]) == (push["url"], 16)
    assert not any("secret" in key for key in pushed)
    with httpx.Client(base_url=server.url) as http:
        http.put(f"/v1/topics/{topic}/groups/p", json={"push": None})

    # A failed attempt (nack through the API) sends it to the DLQ: max_attempts is 1 now.
    run("send", topic, "doomed", "--id", "d1")
    with httpx.Client(base_url=server.url) as http:
        receipt = ""
        while not receipt:
            r = http.post(f"/v1/topics/{topic}/groups/h/receive", json={"wait_ms": 5000})
            receipt = next((m["receipt"] for m in r.json()["messages"] if m["msg_id"] == "d1"), "")
        http.put(f"/v1/topics/{topic}/groups/h", json={"max_attempts": 1})
        assert (
            http.post(f"/v1/topics/{topic}/groups/h/nack", json={"receipts": [receipt]}).json()[
                "results"
            ][0]["status"]
            == "nacked"
        )
    (dead,) = run.json("dlq", "list", topic, "h")
    assert (dead["msg_id"], dead["attempts"]) == ("d1", 1)
    out, _ = run("dlq", "list", topic, "h")
    assert out.split()[:5] == ["msg_id", "attempts", "last", "failure", "dead"]
    assert "d1" in out
    assert run.json("dlq", "redrive", topic, "h", "--all")[0]["state"] == "pending"
    assert run("dlq", "list", topic, "h")[0] == "no dead letters\n"
    run("dlq", "redrive", topic, "h", "d1", code=Exit.REFUSED)


def test_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["--url", url, "status", "t", "m"]) == Exit.UNREACHABLE
    err = capsys.readouterr().err
    assert err.startswith(f"rocktimer: cannot reach {url}: ")
    assert err.count("\n") == 1


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == Exit.OK
    out = " ".join(capsys.readouterr().out.split())
    assert "3 server unreachable" in out


def _wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"rocktimer serve not ready at {url} (exit {process.poll()})")


def _script(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROCKTIMER), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_console_script_serve_and_api_keys(tmp_path: Path) -> None:
    """The installed script: ``serve`` runs the service; ROCKTIMER_URL / ROCKTIMER_API_KEY
    reach it; a missing or weak key exits 4."""
    port = free_port()
    keys = json.dumps({"p-key": "producer", "c-key": "consumer"})
    env = {**os.environ, "ROCKTIMER_API_KEYS": keys, "ROCKTIMER_LOG_LEVEL": "warning"}
    args = ["serve", "--port", str(port), "--data-dir", str(tmp_path / "data")]
    server = subprocess.Popen([str(ROCKTIMER), *args], env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, server)
        sent = _script(
            "send", "t", "hi", "--id", "k1", ROCKTIMER_URL=url, ROCKTIMER_API_KEY="p-key"
        )
        assert (sent.returncode, sent.stdout.split(":")[0]) == (0, "scheduled"), sent.stderr
        denied = _script(
            "tail", "t", "g", "--count", "1", ROCKTIMER_URL=url, ROCKTIMER_API_KEY="p-key"
        )
        assert denied.returncode == Exit.DENIED
        assert denied.stderr.startswith("rocktimer: 403 Forbidden")
        assert denied.stderr.count("\n") == 1
        anonymous = _script("status", "t", "k1", ROCKTIMER_URL=url, ROCKTIMER_API_KEY="")
        assert (anonymous.returncode, anonymous.stderr[:27]) == (
            Exit.DENIED,
            "rocktimer: 401 Unauthorized",
        )
        bad_flag = _script("send", "t", "x", "--nope", ROCKTIMER_URL=url)
        assert (bad_flag.returncode, bad_flag.stderr.count("\n")) == (Exit.USAGE, 1)
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_topics_and_groups(run: Run, topic: str) -> None:
    run("send", topic, "later", "--id", "x1", "--delay", "1h")
    run("send", topic, "now", "--id", "x2")
    run("tail", topic, "g1", "--count", "1", "--no-ack")
    (mine,) = [t for t in run.json("topics") if t["topic"] == topic]
    assert (mine["scheduled"], mine["delivered"], mine["cancelled"]) == (1, 1, 0)
    out, _ = run("topics")
    assert out.split()[:4] == ["topic", "scheduled", "delivered", "cancelled"]
    assert topic in out
    (group,) = run.json("groups", topic)
    assert (group["group"], group["backlog"], group["inflight"]) == ("g1", 0, 1)
    out, _ = run("groups", topic)
    assert out.split()[6:9] == ["g1", "0", "1"]
    assert run("groups", "t-none")[0] == "no groups yet\n"


def test_pipeline_jobs_get_the_arguments_and_the_url(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """load / report / audit run python -m pipeline.<job> with the arguments as given and
    the CLI's --url; the job's exit code is the command's (the Spark runs: tests/pipeline)."""
    url = f"http://127.0.0.1:{free_port()}"
    rows = tmp_path / "rows.csv"
    rows.write_text("body\nx\n")
    args = ["--input", str(rows), "--format", "csv", "--rejects", str(tmp_path / "rejects")]
    assert main(["--url", url, "load", *args]) == 2
    assert (
        capfd.readouterr().err
        == f"error: cannot reach the service at {url}: [Errno 111] Connection refused\n"
    )
    assert main(["audit", "--help"]) == 0
    assert capfd.readouterr().out.startswith("usage: python -m pipeline.audit")


def test_reschedule(run: Run, topic: str) -> None:
    run("send", topic, "later", "--id", "r1", "--delay", "1h")
    (moved,) = run.json("reschedule", topic, "r1", "--delay", "2h")
    assert run.json("status", topic, "r1")[0]["deliver_at_ms"] == moved["deliver_at_ms"]
    out, _ = run("reschedule", topic, "r1", "--at", "2030-01-31T09:00:00Z")
    assert out.startswith(f"rescheduled: {topic}/r1 for 2030-01-31 09:00:00 UTC (in ")
    _, err = run("reschedule", topic, "r1", code=Exit.USAGE)
    assert "give one" in err
    run("cancel", topic, "r1")
    _, err = run("reschedule", topic, "r1", "--delay", "1s", code=Exit.REFUSED)
    assert err.startswith("rocktimer: 409 Conflict")
