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
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer

from app.defaults import MAX_BATCH
from cli.connection import Exit
from cli.main import PIPELINE_JOBS, app, main
from tests.support.process import START_TIMEOUT_S, free_port
from tests.support.server import Server

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
    assert "2 bad usage, or input the server refused as invalid" in out
    assert "3 server unreachable" in out
    assert "130 interrupted (Ctrl+C)" in out


@pytest.mark.parametrize("group", [[], ["dlq"]])
def test_help_lists_each_command_in_one_sentence(
    group: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each command's line in the listing is its help's first paragraph, a whole sentence:
    a paragraph that runs over lines in the source would break there mid-sentence."""
    monkeypatch.setenv("COLUMNS", "400")  # wide enough that nothing wraps
    assert main([*group, "--help"]) == Exit.OK
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if "Commands" in line) + 1
    rows = [line.strip("│ ") for line in lines[start:]]
    rows = rows[: next(i for i, row in enumerate(rows) if row.startswith("╰"))]
    assert len(rows) >= 2
    for line, row in zip(lines[start:], rows, strict=False):
        assert line[2] != " ", f"a command's help goes on over lines: {row!r}"
        assert row.endswith("."), row


def _command_paths() -> list[list[str]]:
    """Every command of rocktimer by its words (``["dlq", "list"]``), but the Spark jobs,
    whose --help is their own (python -m pipeline.<job> --help)."""
    paths: list[list[str]] = []

    def walk(command: Any, words: list[str]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            if name not in PIPELINE_JOBS:
                paths.append([*words, name])
                walk(sub, [*words, name])

    walk(typer.main.get_command(app), [])
    return paths


@pytest.mark.parametrize("words", _command_paths(), ids=" ".join)
def test_help_paragraphs_end_in_full_sentences(
    words: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal wider than the source, each paragraph of a command's help is one
    line: rich wraps it to the terminal, never where the docstring happened to break."""
    monkeypatch.setenv("COLUMNS", "400")
    assert main([*words, "--help"]) == Exit.OK
    lines = capsys.readouterr().out.splitlines()
    prose = lines[next(i for i, line in enumerate(lines) if "Usage:" in line) + 1 :]
    prose = prose[: next(i for i, line in enumerate(prose) if line.startswith("╭"))]
    paragraphs = [line.strip() for line in prose if line.strip()]
    assert paragraphs
    for paragraph in paragraphs:
        assert paragraph.endswith("."), f"{' '.join(words)} --help breaks: {paragraph!r}"


class _NotRocktimer(BaseHTTPRequestHandler):
    """Some other web server at the URL: an HTML error page for everything."""

    def do_GET(self) -> None:
        body = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
        self.send_response(502)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:  # quiet
        pass


@pytest.fixture
def not_rocktimer() -> Iterator[str]:
    web = ThreadingHTTPServer(("127.0.0.1", 0), _NotRocktimer)
    thread = threading.Thread(target=web.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{web.server_address[1]}"
    web.shutdown()
    web.server_close()


def test_errors_are_one_line_in_words(
    run: Run, server: Server, topic: str, not_rocktimer: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refusal is one line: status, title and the detail naming the field; never a raw
    reply. Bad input exits 2, and so does a --url or a name that cannot reach a resource
    (an empty topic, '..', a '/'); an answer that is not the service's says so."""
    wrong = Run(f"{server.url}/x", capsys)
    _, err = wrong("topics", code=Exit.USAGE)
    assert err == (
        f"rocktimer: 404 Not Found: not a route of the server at {server.url}/x "
        "(is --url its base URL?)\n"
    )
    (problem,) = wrong.json("topics", code=Exit.USAGE)  # --json: the problem document too
    assert (problem["status"], problem["title"]) == (404, "Not Found")

    for args, where in (
        (["send", "", "hi"], "'topic': must not be empty"),
        (["status", topic, ".."], "'msg_id': '..' cannot be one part of a URL path"),
        (["cancel", topic, "a/b"], "'msg_id': 'a/b' cannot be one part of a URL path"),
        (["tail", topic, "", "--count", "1"], "'group': must not be empty"),
        (["dlq", "redrive", topic, "g", "."], "'msg_ids': '.' cannot be one part"),
        (["send", topic, "x", "--delay", "5"], "--delay: 5 has no unit: write 5ms, 5s"),
        (["tail", topic, "g", "--invisible", "30"], "--invisible: 30 has no unit"),
        (["tail", topic, "g", "--count", "1", "--wait", "0s"], "--wait: give 100ms to 30s"),
        (["tail", topic, "g", "--count", "1", "--wait", "31s"], "--wait: give 100ms to 30s"),
    ):
        _, err = run(*args, code=Exit.USAGE)
        assert err.count("\n") == 1, err
        assert where in err, err

    _, err = run("reschedule", topic, "nope", "--delay", "1s", code=Exit.REFUSED)
    assert err == f"rocktimer: 404 Not Found: no message 'nope' in topic '{topic}'\n"

    other = Run(not_rocktimer, capsys)
    _, err = other("topics", code=Exit.UNAVAILABLE)
    assert err == (
        f"rocktimer: 502 Bad Gateway: not a rocktimer reply (is --url {not_rocktimer} right?)\n"
    )


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


# sitecustomize for a Python without the pipeline extra, as in the `make run` venv.
_NO_PIPELINE_EXTRA = """
import sys
from importlib.abc import MetaPathFinder


class NoPipelineExtra(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"pyspark", "py4j", "pandas", "matplotlib"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoPipelineExtra())
"""


def test_pipeline_jobs_without_the_pipeline_extra(server: Server, tmp_path: Path) -> None:
    """load / report / audit where PySpark is not installed: one line saying how to get
    the pipeline extra, exit 2 (not a traceback chained to a second one)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_NO_PIPELINE_EXTRA)
    rows, events = tmp_path / "rows.csv", tmp_path / "events"
    rows.write_text("body\nx\n")
    events.mkdir()
    out = ["--out", str(tmp_path / "report")]
    for job in (
        ["load", "--input", str(rows), "--format", "csv", "--rejects", str(tmp_path / "rej")],
        ["report", "--events", str(events), *out],
        ["audit", "--events", str(events)],
    ):
        done = _script(job[0], *job[1:], PYTHONPATH=str(site), ROCKTIMER_URL=server.url)
        assert (done.returncode, done.stderr) == (
            Exit.USAGE,
            "error: the Spark jobs need the pipeline extra (No module named 'pyspark'): "
            "pip install -e '.[pipeline]' (make .venv/.test-stamp installs it too) and a "
            "Java 17 runtime\n",
        ), job
    assert _script("report", "--help", PYTHONPATH=str(site)).returncode == Exit.OK


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
