"""``rocktimer tail``: it streams from a server that has streams, polls one that has not
(a real local proxy that answers the stream with 404), and never holds a message it
does not print."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.cli.test_cli import Run
from tests.e2e.server import Server

STREAM_ROUTE = 'route="/v1/topics/{topic}/groups/{group}/stream"'


def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def _send_later(url: str, topic: str, msg_id: str, delay_s: float) -> threading.Thread:
    def send() -> None:
        time.sleep(delay_s)
        httpx.post(f"{url}/v1/topics/{topic}/messages", json={"msg_id": msg_id, "body": msg_id})

    thread = threading.Thread(target=send)
    thread.start()
    return thread


def test_tail_streams_what_falls_due_and_acks_it(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, run = _topic(), Run(server.url, capsys)
    run("send", topic, "first", "--id", "a")
    sender = _send_later(server.url, topic, "b", 0.5)  # sent while tail waits on its stream
    got = run.json("tail", topic, "g", "--count", "2")
    sender.join()
    assert [(m["msg_id"], m["attempt"]) for m in got] == [("a", 1), ("b", 1)]
    for msg_id in ("a", "b"):
        assert run.json("status", topic, msg_id, "--group", "g")[0]["state"] == "acked"
    assert STREAM_ROUTE in httpx.get(f"{server.url}/metrics").text


def test_tail_with_a_count_holds_no_message_it_does_not_print(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, run = _topic(), Run(server.url, capsys)
    for i in range(5):
        run("send", topic, f"m{i}", "--id", f"m{i}")
    assert len(run.json("tail", topic, "g", "--count", "2")) == 2
    r = httpx.post(f"{server.url}/v1/topics/{topic}/groups/g/receive", json={"max_messages": 10})
    assert len(r.json()["messages"]) == 3, "the other three are still there to receive"


class _NoStreams(BaseHTTPRequestHandler):
    """Forwards every request to the real server, but answers a stream with 404 as a
    server from before streams would."""

    upstream = ""
    paths: list[str] = []  # one proxy per test (the fixture resets it)

    def _forward(self) -> None:
        self.paths.append(self.path)
        if self.path.split("?")[0].endswith("/stream"):
            self._reply(404, b'{"status": 404, "title": "Not Found", "detail": "Not Found"}')
            return
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {"content-type": self.headers.get("content-type") or "application/json"}
        r = httpx.request(
            self.command, self.upstream + self.path, content=body, headers=headers, timeout=40
        )
        self._reply(r.status_code, r.content)

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def do_PUT(self) -> None:
        self._forward()

    def log_message(self, *_: object) -> None:  # quiet
        pass


@pytest.fixture
def no_streams(server: Server) -> Iterator[str]:
    _NoStreams.upstream, _NoStreams.paths = server.url, []
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _NoStreams)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{proxy.server_address[1]}"
    proxy.shutdown()
    proxy.server_close()


def test_tail_polls_a_server_without_streams(
    server: Server, no_streams: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, run = _topic(), Run(no_streams, capsys)
    run("send", topic, "first", "--id", "a")
    sender = _send_later(server.url, topic, "b", 0.5)
    got = run.json("tail", topic, "g", "--count", "2", "--wait", "5s")
    sender.join()
    assert [m["msg_id"] for m in got] == ["a", "b"]
    tried = [p.split("?")[0].rsplit("/", 1)[1] for p in _NoStreams.paths if "/groups/" in p]
    assert tried[0] == "stream"
    assert "receive" in tried
    assert "stream" not in tried[1:]
    assert run.json("status", topic, "b", "--group", "g")[0]["state"] == "acked"
