"""Streaming receive (server-sent events) over real HTTP: messages as they fall due, the
in-flight bound and what frees a slot, keep-alives, closed streams, streams sharing a
group, SIGTERM, bad parameters and the consumer role."""

from __future__ import annotations

import contextlib
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import running
from tests.e2e.conftest import now_ms
from tests.e2e.test_lifecycle import STOP_BOUND_S
from tests.support.server import Server

WAIT_S = 20  # for an event that must come (generous: the machine is shared)
KEEPALIVE_MS = 100
KEYS = '{"pk": "producer", "ck": "consumer"}'


class Events:
    """One open stream, read on a thread: ``next()`` the next event as (kind, data)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._got: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        kind = ""
        with contextlib.suppress(httpx.HTTPError):
            for line in self.response.iter_lines():
                if line.startswith(":"):
                    self._got.put(("comment", line[1:].strip()))
                elif line.startswith("event: "):
                    kind = line[len("event: ") :]
                elif line.startswith("data: "):
                    self._got.put((kind, orjson.loads(line[len("data: ") :])))
        self._got.put(None)  # the stream ended

    def next(self, timeout_s: float = WAIT_S) -> tuple[str, Any] | None:
        return self._got.get(timeout=timeout_s)

    def message(self) -> dict[str, Any]:
        """The next message event (keep-alives skipped)."""
        while True:
            got = self.next()
            assert got is not None, "the stream ended"
            if got[0] == "message":
                message: dict[str, Any] = got[1]
                return message

    def messages(self, n: int) -> list[dict[str, Any]]:
        return [self.message() for _ in range(n)]

    def end(self) -> None:
        """Until the server ends the stream."""
        while self.next() is not None:
            pass


@contextlib.contextmanager
def stream(client: httpx.Client, topic: str, group: str = "g", **params: int) -> Iterator[Events]:
    with client.stream("GET", f"/v1/topics/{topic}/groups/{group}/stream", params=params) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        events = Events(r)
        try:
            yield events
        finally:  # go away as a client would: the reader thread's recv ends with it
            sock = r.extensions["network_stream"].get_extra_info("socket")
            with contextlib.suppress(OSError):  # closed already: the server ended the stream
                sock.shutdown(socket.SHUT_RDWR)
            events.reader.join(timeout=WAIT_S)


def send(client: httpx.Client, topic: str, *msg_ids: str, at_ms: int | None = None) -> None:
    items = [{"msg_id": m, "body": m, "deliver_at_ms": at_ms or now_ms()} for m in msg_ids]
    r = client.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items})
    assert r.status_code in (200, 201), r.text


def settle(client: httpx.Client, topic: str, how: str, *messages: dict[str, Any]) -> list[str]:
    receipts = [m["receipt"] for m in messages]
    body: dict[str, Any] = {"receipts": receipts}
    if how == "nack":
        body["delay_ms"] = 0
    r = client.post(f"/v1/topics/{topic}/groups/g/{how}", json=body)
    assert r.status_code == 200, r.text
    return [x["status"] for x in r.json()["results"]]


def gauge(client: httpx.Client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_messages_come_as_they_fall_due_as_receive_items(client: httpx.Client, topic: str) -> None:
    with stream(client, topic, invisible_ms=5_000) as events:
        due = now_ms() + 400
        send(client, topic, "later", at_ms=due)
        send(client, topic, "now")
        first, second = events.messages(2)
        assert (first["msg_id"], second["msg_id"]) == ("now", "later")
        assert second["delivered_at_ms"] >= due
        assert {"topic", "msg_id", "body", "attempt", "receipt", "deliver_at_ms"} <= set(first)
        assert settle(client, topic, "ack", first, second) == ["acked", "acked"]


def test_at_most_max_in_flight_until_a_slot_is_freed(client: httpx.Client, topic: str) -> None:
    send(client, topic, *(f"m{i}" for i in range(5)))
    with stream(client, topic, max_in_flight=2) as events:
        held = events.messages(2)
        until(lambda: gauge(client, "rocktimer_long_polls") == 0, "a full stream does not poll")
        r = client.post(f"/v1/topics/{topic}/groups/g/receive", json={"max_messages": 10})
        rest = r.json()["messages"]
        assert len(rest) == 3, "a full stream takes no more"
        assert {m["msg_id"] for m in held + rest} == {f"m{i}" for i in range(5)}
        settle(client, topic, "ack", *rest)


def test_ack_and_nack_each_free_a_slot(client: httpx.Client, topic: str) -> None:
    send(client, topic, "a", "b", "c")
    with stream(client, topic, max_in_flight=1) as events:
        first = events.message()
        assert settle(client, topic, "ack", first) == ["acked"]
        second = events.message()
        assert settle(client, topic, "nack", second) == ["nacked"]
        third = events.message()
        assert settle(client, topic, "ack", third) == ["acked"]
        fourth = events.message()
        assert settle(client, topic, "ack", fourth) == ["acked"]
    seen = [(m["msg_id"], m["attempt"]) for m in (first, second, third, fourth)]
    assert sorted(seen) == sorted([("a", 1), ("b", 1), ("c", 1), (second["msg_id"], 2)])


def test_a_closed_stream_stops_and_its_messages_come_back(client: httpx.Client, topic: str) -> None:
    send(client, topic, "a")
    with stream(client, topic, invisible_ms=1_000) as events:
        held = events.message()
    until(lambda: gauge(client, "rocktimer_streams") == 0, "the stream never closed")
    started = time.monotonic()
    r = client.post(
        f"/v1/topics/{topic}/groups/g/receive", json={"wait_ms": 10_000, "invisible_ms": 5_000}
    )
    again = r.json()["messages"]
    assert [(m["msg_id"], m["attempt"]) for m in again] == [("a", 2)]
    assert time.monotonic() - started < 8, "back after its invisibility, not after the wait"
    assert settle(client, topic, "ack", held) == ["expired"]
    assert settle(client, topic, "ack", *again) == ["acked"]


def test_two_streams_on_a_group_share_the_messages(client: httpx.Client, topic: str) -> None:
    ids = {f"m{i:02}" for i in range(40)}
    with (
        stream(client, topic, max_in_flight=10) as one,
        stream(client, topic, max_in_flight=10) as two,
    ):
        until(lambda: gauge(client, "rocktimer_streams") >= 2, "two streams open")
        send(client, topic, *sorted(ids))
        got: list[list[dict[str, Any]]] = [[], []]
        for _ in range(2):  # each holds its 10, then gets 10 more once it acks them
            for n, events in enumerate((one, two)):
                batch = events.messages(10)
                got[n] += batch
            for batch in (got[0][-10:], got[1][-10:]):
                assert settle(client, topic, "ack", *batch) == ["acked"] * 10
    seen = [m["msg_id"] for m in got[0] + got[1]]
    assert len(seen) == len(set(seen)) == 40, "no message went to both"
    assert set(seen) == ids


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """API keys on, and a keep-alive every 100 ms."""
    env = {"ROCKTIMER_API_KEYS": KEYS, "ROCKTIMER_STREAM_KEEPALIVE_MS": str(KEEPALIVE_MS)}
    with running(tmp_path_factory.mktemp("stream") / "data", env=env) as srv:
        yield srv


def _keyed(srv: Server, key: str) -> httpx.Client:
    return httpx.Client(base_url=srv.url, timeout=40, headers={"authorization": f"Bearer {key}"})


def test_keep_alive_while_idle_and_the_consumer_role(keyed_server: Server, topic: str) -> None:
    with _keyed(keyed_server, "pk") as producer, _keyed(keyed_server, "ck") as consumer:
        refused = producer.get(f"/v1/topics/{topic}/groups/g/stream")
        assert refused.status_code == 403
        assert refused.headers["content-type"] == "application/problem+json"
        with stream(consumer, topic) as events:
            assert events.next() == ("comment", "keep-alive")
            assert events.next() == ("comment", "keep-alive")
            send(producer, topic, "a")
            assert events.message()["msg_id"] == "a"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"max_in_flight": 1001}, "max_in_flight"),
        ({"max_in_flight": "many"}, "max_in_flight"),
        ({"invisible_ms": 999}, "invisible_ms"),
        ({"invisible_ms": 43_200_001}, "invisible_ms"),
    ],
)
def test_bad_parameters_are_422_naming_the_field(
    client: httpx.Client, topic: str, params: dict[str, Any], field: str
) -> None:
    r = client.get(f"/v1/topics/{topic}/groups/g/stream", params=params)
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/problem+json"
    assert [e["field"] for e in r.json()["errors"]] == [field]


def test_a_stream_of_an_internal_topic_is_422(client: httpx.Client) -> None:
    r = client.get("/v1/topics/%25RETRY%25g/groups/g/stream")
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "topic"


def test_sigterm_ends_open_streams_at_once(
    fresh_server: Callable[..., Server], tmp_path: Path
) -> None:
    srv = fresh_server()
    with httpx.Client(base_url=srv.url, timeout=40) as c:
        send(c, "t", "a")
        with stream(c, "t") as holding, stream(c, "t", group="other") as other:
            assert holding.message()["msg_id"] == other.message()["msg_id"] == "a"
            until(lambda: gauge(c, "rocktimer_long_polls") == 2, "both streams parked")
            assert srv.proc is not None
            started = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            holding.end()
            other.end()
            srv.proc.wait(timeout=30)
    assert time.monotonic() - started < STOP_BOUND_S, "the streams held up the stop"
    srv.proc = None
    assert "Traceback" not in srv.logs()


def test_the_readme_consumer_prints_and_acks(server: Server, topic: str) -> None:
    """The README's ten-line stream consumer, run as written against a real server."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Streaming receive", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    code = code.replace("http://127.0.0.1:8080", server.url).replace("orders", topic)
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as consumer:
        try:
            with httpx.Client(base_url=server.url, timeout=40) as c:
                send(c, topic, "a", "b")
                assert consumer.stdout is not None
                assert [consumer.stdout.readline() for _ in range(2)] == ["a a\n", "b b\n"]
                until(lambda: _state(c, topic, "a") == _state(c, topic, "b") == "acked", "acked")
        finally:
            consumer.kill()


def _state(client: httpx.Client, topic: str, msg_id: str) -> str:
    state: str = client.get(f"/v1/topics/{topic}/groups/billing/messages/{msg_id}").json()["state"]
    return state


def test_head_answers_the_headers_and_holds_nothing(client: httpx.Client, topic: str) -> None:
    send(client, topic, "a")
    r = client.head(f"/v1/topics/{topic}/groups/g/stream")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    got = client.post(f"/v1/topics/{topic}/groups/g/receive", json={"wait_ms": 5000})
    assert [(m["msg_id"], m["attempt"]) for m in got.json()["messages"]] == [("a", 1)]


def test_a_push_group_has_no_stream(client: httpx.Client, topic: str) -> None:
    """Its messages go to its webhook: a stream taking some would starve it."""
    push = {"push": {"url": "http://127.0.0.1:9/hook"}}  # nothing listens: no message is sent
    assert client.put(f"/v1/topics/{topic}/groups/g", json=push).status_code == 200
    r = client.get(f"/v1/topics/{topic}/groups/g/stream")
    assert r.status_code == 409
    assert r.headers["content-type"] == "application/problem+json"
    assert "push" in r.json()["detail"]
