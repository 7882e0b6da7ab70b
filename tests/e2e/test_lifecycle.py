"""Start, stop and logs of the real server process: one clear line for what stops a start,
a quick stop with thousands of long polls open, an access log (text or JSON), /docs
served with no internet."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import httpx
import orjson

from tests.support.process import ROOT, free_port
from tests.support.server import Server

OPEN_POLLS = 2_000
STOP_BOUND_S = 2.0  # issue 12: a stop with 2,000 polls open takes less than this


def start_failure(tmp_path: Path, **env: str) -> tuple[int, str]:
    """Run ``python -m app`` expecting it to refuse to start; its exit code and stderr."""
    full = {
        **os.environ,
        "ROCKTIMER_PORT": str(free_port()),
        "ROCKTIMER_DATA_DIR": str(tmp_path / "data"),
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-m", "app"],
        cwd=ROOT,
        env=full,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stderr.decode()


def test_a_bad_setting_stops_the_process_with_one_line(tmp_path: Path) -> None:
    code, err = start_failure(tmp_path, ROCKTIMER_PORT="abc")
    assert code == 2
    assert err == (
        "rocktimer: bad setting ROCKTIMER_PORT='abc': Input should be a valid integer, "
        "unable to parse string as an integer; it accepts an integer from 0 to 65535\n"
    )
    assert not (tmp_path / "data").exists()  # refused before touching anything


def test_a_maximum_delay_past_its_bound_stops_the_process_with_one_line(tmp_path: Path) -> None:
    """ROCKTIMER_MAX_DELAY_MS is bounded (100 years): past it, sends and schedules could
    ask for times no datetime and no timer key can hold."""
    code, err = start_failure(tmp_path, ROCKTIMER_MAX_DELAY_MS=str(2**63 - 1))
    assert code == 2
    assert err.startswith("rocktimer: bad setting ROCKTIMER_MAX_DELAY_MS='9223372036854775807'")
    assert err.endswith("it accepts an integer from 0 to 3155760000000\n")
    assert len(err.splitlines()) == 1


# A server process whose scanner thread raises at its first hand-over of due timers: the
# fault is put in by the test's launcher, the process is the service's own main().
BROKEN_SCANNER = """
import workers.scanner

def broken(self, found):
    raise RuntimeError("injected: the hand-over failed")

workers.scanner.Scanner._hand_over = broken
from app.__main__ import main
main()
"""


def test_a_worker_thread_that_dies_ends_the_process_non_zero(tmp_path: Path) -> None:
    """A worker thread that ends (here the scanner, on an error) must not leave a server
    answering 201 to sends it will never deliver: the process stops and exits 3, naming
    the thread and the error, for its supervisor (docker's restart policy) to restart it."""
    srv = Server(tmp_path / "data")
    srv.argv = [sys.executable, "-c", BROKEN_SCANNER]
    srv.start()
    try:
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            sent = c.post("/v1/topics/t/messages", json={"body": "x", "delay_ms": 50})
            assert sent.status_code == 201, sent.text
        assert srv.proc is not None
        code = srv.proc.wait(timeout=30)
    finally:
        srv.kill()
    assert code == 3, srv.tail()
    logs = srv.logs()
    assert "a worker thread ended (rocktimer-scanner ended: RuntimeError('injected" in logs, logs


def test_a_data_dir_held_by_another_server_is_one_line(
    fresh_server: Callable[..., Server], tmp_path: Path
) -> None:
    running = fresh_server()
    code, err = start_failure(tmp_path, ROCKTIMER_DATA_DIR=str(running.data_dir))
    assert code == 1
    assert len(err.strip().splitlines()) == 1, err
    assert "in use by another process" in err
    assert str(running.data_dir) in err
    assert httpx.get(f"{running.url}/readyz").status_code == 200  # the first one goes on


def _open_polls(srv: Server, n: int) -> list[socket.socket]:
    """``n`` long polls of 30 s, each on its own connection, parked in the server (raw
    sockets: an HTTP client library took a minute to open 2,000 on this machine)."""
    body = b'{"wait_ms": 30000}'
    socks = []
    for i in range(n):
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
        sock.sendall(
            b"POST /v1/topics/quiet/groups/g%d/receive HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (i % 10, len(body), body)
        )
        socks.append(sock)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:  # a loaded machine may take a while to answer beside 2,000 new connections
            text = httpx.get(f"{srv.url}/metrics", timeout=30).text
        except httpx.TransportError:
            continue
        waiting = re.search(r"^rocktimer_long_polls (\S+)$", text, re.MULTILINE)
        if waiting and float(waiting.group(1)) == n:
            return socks
        time.sleep(0.1)
    for sock in socks:
        sock.close()
    raise AssertionError(f"{n} long polls did not all park within 60 s")


def _reply(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    return data


def test_sigterm_answers_thousands_of_open_long_polls_at_once(
    fresh_server: Callable[..., Server],
) -> None:
    srv = fresh_server()
    socks = _open_polls(srv, OPEN_POLLS)
    assert srv.proc is not None
    started = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    srv.proc.wait(timeout=60)
    stopped_in = time.monotonic() - started
    srv.proc = None
    replies = [_reply(sock) for sock in socks]  # (and closed) before any assertion
    assert stopped_in < STOP_BOUND_S, f"the stop took {stopped_in:.1f} s"
    assert all(r.startswith(b"HTTP/1.1 200 ") for r in replies)
    assert {r.rsplit(b"\r\n\r\n", 1)[1] for r in replies} == {b'{"messages":[]}'}
    assert "Traceback" not in srv.logs()


class _Assets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.urls.append(value)


def test_access_log_in_json_and_docs_that_need_no_internet(
    fresh_server: Callable[..., Server],
) -> None:
    srv = fresh_server(ROCKTIMER_LOG_LEVEL="info", ROCKTIMER_LOG_FORMAT="json")
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        page = c.get("/docs")
        assert page.status_code == 200
        parser = _Assets()
        parser.feed(page.text)
        scripts = re.findall(r"""url: ?['"]([^'"]+)['"]""", page.text)  # the spec it loads
        assert scripts == ["/openapi.json"]
        assert any(u.endswith(".js") for u in parser.urls)
        for url in [*parser.urls, *scripts]:
            assert url.startswith("/"), f"/docs loads {url} from elsewhere"
            asset = c.get(url)
            assert asset.status_code == 200, url
            assert len(asset.content) > 100, url
        assert c.get("/v1/topics/x/messages/nope").status_code == 404
    srv.terminate()
    lines = [orjson.loads(line) for line in srv.logs().splitlines() if line.strip()]
    access = [e for e in lines if e["logger"] == "rocktimer.access"]
    miss = [e for e in access if e["path"] == "/v1/topics/x/messages/nope"]
    assert len(miss) == 1
    assert miss[0]["method"] == "GET"
    assert miss[0]["status"] == 404
    assert miss[0]["ms"] >= 0
    assert miss[0]["level"] == "info"
    assert {e["path"] for e in access} >= {"/docs", "/openapi.json"}
    assert any(e["logger"].startswith("uvicorn") for e in lines)  # uvicorn's lines too


def test_access_log_is_one_text_line_per_request_by_default(
    fresh_server: Callable[..., Server],
) -> None:
    srv = fresh_server(ROCKTIMER_LOG_LEVEL="info")
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        c.post("/v1/topics/t/messages", json={"msg_id": "a", "body": "x"})
        c.get("/v1/topics?limit=5")
    srv.terminate()
    log = srv.logs()
    assert re.search(r"rocktimer\.access: POST /v1/topics/t/messages 201 [\d.]+ms$", log, re.M)
    assert re.search(r"rocktimer\.access: GET /v1/topics\?limit=5 200 [\d.]+ms$", log, re.M)
