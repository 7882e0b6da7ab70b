"""``rocktimer tail``: it acks each message once printed, streams from a server that has
streams (until Ctrl+C), polls one that has not (a real local proxy that answers the stream
with 404) or when it stops at a count, never holds a message it does not print, and
names every printed message the server would not take the ack of."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any

import httpx
import orjson
import pytest

from cli.connection import Exit
from tests.cli.test_cli import ROCKTIMER, Run
from tests.support.server import Server

STREAM_ROUTE = 'route="/v1/topics/{topic}/groups/{group}/stream"'
RECEIVE_ROUTE = 'route="/v1/topics/{topic}/groups/{group}/receive"'
DEADLINE_S = 60.0  # for a condition the test waits on; reached in well under a second
BIG_BODY = "x" * (2 << 20)  # a printed line no pipe buffer holds: the print blocks


def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def _send(url: str, topic: str, msg_id: str, body: str | None = None) -> None:
    r = httpx.post(
        f"{url}/v1/topics/{topic}/messages", json={"msg_id": msg_id, "body": body or msg_id}
    )
    assert r.status_code == 201, r.text


def _send_later(url: str, topic: str, msg_id: str, delay_s: float) -> threading.Thread:
    def send() -> None:
        time.sleep(delay_s)
        _send(url, topic, msg_id)

    thread = threading.Thread(target=send)
    thread.start()
    return thread


def _seen_by(url: str, topic: str, group: str, msg_id: str) -> dict[str, Any]:
    """The message as the group sees it (state, attempts); {} before the group saw it."""
    r = httpx.get(f"{url}/v1/topics/{topic}/groups/{group}/messages/{msg_id}")
    return dict(r.json()) if r.status_code == 200 else {}


def _until(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class _Tail:
    """``rocktimer tail`` as the console script, as someone runs it in a terminal: its
    output read only when the test says, stopped by SIGINT (Ctrl+C)."""

    def __init__(self, url: str, *args: str) -> None:
        command = [str(ROCKTIMER), "--url", url, "tail", *args, "--json"]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # A terminal's foreground job takes Ctrl+C; a suite started in the background
            # (`make test &`) passes SIGINT on ignored, and Python then never raises
            # KeyboardInterrupt: the tail would not stop.
            preexec_fn=_default_sigint,  # noqa: PLW1509 (one signal reset, nothing else)
        )
        self.stdout: IO[bytes] = self.process.stdout  # type: ignore[assignment]

    def message(self) -> dict[str, Any]:
        line = self.stdout.readline()
        assert line, f"tail ended: {self.finish()}"
        return dict(orjson.loads(line))

    def interrupt(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGINT)
        return self.finish()

    def finish(self) -> tuple[int, str]:
        _, err = self.process.communicate(timeout=DEADLINE_S)
        return self.process.returncode, err.decode()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


@pytest.fixture
def tails() -> Iterator[list[_Tail]]:
    started: list[_Tail] = []
    yield started
    for tail in started:
        tail.kill()


def test_tail_with_a_count_acks_each_message_once_printed(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --count 2 the first message is acked as soon as it is printed, not when the
    second arrives: a second that comes after the first's --invisible ran out does not
    bring the first back to be printed (and counted) again."""
    topic, run = _topic(), Run(server.url, capsys)
    run("send", topic, "first", "--id", "a")

    def a_settled() -> bool:  # acked, or (not acked) received a second time
        seen = _seen_by(server.url, topic, "g", "a")
        return bool(seen.get("state") == "acked" or seen.get("attempts", 0) > 1)

    def send_b_once_a_settled() -> None:
        _until("a acked or back", a_settled)
        _send(server.url, topic, "b")

    sender = threading.Thread(target=send_b_once_a_settled)
    sender.start()
    got = run.json("tail", topic, "g", "--count", "2", "--invisible", "10s", "--wait", "5s")
    sender.join()
    assert [(m["msg_id"], m["attempt"]) for m in got] == [("a", 1), ("b", 1)]
    for msg_id in ("a", "b"):
        assert _seen_by(server.url, topic, "g", msg_id)["state"] == "acked"
    metrics = httpx.get(f"{server.url}/metrics").text
    assert RECEIVE_ROUTE in metrics  # a count is polled for: a stream could overshoot it


def test_tail_names_a_message_whose_ack_came_too_late(server: Server, tails: list[_Tail]) -> None:
    """A printed message whose --invisible ran out before the ack (here: the print blocks
    on a full pipe until the test reads it) is named on stderr and the exit code is 1."""
    topic = _topic()
    _send(server.url, topic, "slow", BIG_BODY)
    tail = _Tail(server.url, topic, "g", "--count", "1", "--invisible", "1s")
    tails.append(tail)
    _until(  # received, and its invisibility ran out: the group counts a failed attempt
        "slow back", lambda: "last_failure_ms" in _seen_by(server.url, topic, "g", "slow")
    )
    assert tail.message()["msg_id"] == "slow"  # the print completes: then the ack is tried
    code, err = tail.finish()
    assert (code, err) == (
        Exit.REFUSED,
        f"not acked: {topic}/slow (attempt 1): its --invisible ran out before the ack; "
        "the group receives it again\n",
    )
    assert _seen_by(server.url, topic, "g", "slow")["state"] == "pending"


def test_tail_streams_acks_each_and_stops_on_ctrl_c(server: Server, tails: list[_Tail]) -> None:
    """Without --count: streamed, each acked once printed; Ctrl+C while a message is being
    printed leaves that one unacked (it comes back), says so, and exits 130."""
    topic = _topic()
    _send(server.url, topic, "a")
    tail = _Tail(server.url, topic, "g")
    tails.append(tail)
    assert tail.message()["msg_id"] == "a"
    _until("a acked", lambda: _seen_by(server.url, topic, "g", "a").get("state") == "acked")
    _send(server.url, topic, "big", BIG_BODY)
    assert tail.stdout.read(100).startswith(b'{"msg_id": "big"')  # printing: blocked on the pipe
    code, err = tail.interrupt()
    assert code == Exit.INTERRUPTED
    assert err.splitlines()[-2:] == [
        "1 received and not printed, so not acked: the group receives them again after "
        "--invisible 30s",
        "stopped after 1 messages",
    ]
    assert _seen_by(server.url, topic, "g", "big")["state"] == "inflight"
    assert STREAM_ROUTE in httpx.get(f"{server.url}/metrics").text


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
    server: Server, no_streams: str, tails: list[_Tail]
) -> None:
    topic = _topic()
    _send(server.url, topic, "a")
    tail = _Tail(no_streams, topic, "g", "--wait", "5s")
    tails.append(tail)
    assert tail.message()["msg_id"] == "a"
    sender = _send_later(server.url, topic, "b", 0.5)
    assert tail.message()["msg_id"] == "b"
    sender.join()
    _until("b acked", lambda: _seen_by(server.url, topic, "g", "b").get("state") == "acked")
    assert tail.interrupt()[0] == Exit.INTERRUPTED
    tried = [p.split("?")[0].rsplit("/", 1)[1] for p in _NoStreams.paths if "/groups/" in p]
    assert tried[0] == "stream"
    assert "receive" in tried
    assert "stream" not in tried[1:]
