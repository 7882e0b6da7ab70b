"""The edges of the contract over real HTTP (issue 10, api.md "Edges (settled)"): internal
topics, bounded replies and headers, unaddressable msg_ids, no internal text in errors."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from app.http import OneWrite
from tests.e2e.test_bad_input import assert_problem
from tests.support.server import Server

MiB = 1024 * 1024


def raw_request(url: str, request: bytes, *more: bytes) -> bytes:
    """Send bytes as they are (no client normalises the path) and read the whole reply;
    ``more``: pieces sent after it, 50 ms apart (each its own read on the server)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=20) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request)  # the server may answer and close before reading it all
            for piece in more:
                time.sleep(0.05)
                sock.sendall(piece)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("internal", ["%25RETRY%25g", "%25INVISIBLE%25g"])
def test_receiving_from_an_internal_topic_is_422(
    client: httpx.Client, topic: str, internal: str
) -> None:
    """Issue 10.7: after a nack, receiving from %RETRY%{group} answered 503 with an internal
    decode error and Retry-After."""
    client.post(f"/v1/topics/{topic}/messages", json={"body": "x"})
    got = client.post(f"/v1/topics/{topic}/groups/g/receive", json={"wait_ms": 5000}).json()
    nack = {"receipts": [got["messages"][0]["receipt"]], "delay_ms": 0}
    assert client.post(f"/v1/topics/{topic}/groups/g/nack", json=nack).status_code == 200
    r = client.post(f"/v1/topics/{internal}/groups/x/receive", json={})
    assert_problem(r, 422)
    assert "retry-after" not in r.headers
    assert "internal" in r.json()["detail"]
    receipts = {"receipts": ["x"]}
    assert_problem(client.post(f"/v1/topics/{internal}/groups/x/ack", json=receipts), 422)
    dlq = client.post("/v1/topics/%25DLQ%25g/groups/x/receive", json={})
    assert dlq.status_code == 200  # a dead-letter topic is readable


def test_a_receive_reply_is_capped_by_bytes_but_carries_at_least_one(
    fresh_server: Callable[..., Server],
) -> None:
    """Issue 10.8: 50 x 4 MiB messages built a 210 MB reply."""
    srv = fresh_server(ROCKTIMER_MAX_RECEIVE_BYTES=str(2 * MiB))
    big = "x" * (MiB + MiB // 2)
    with httpx.Client(base_url=srv.url, timeout=40) as c:
        for i in range(3):
            r = c.post("/v1/topics/big/messages", json={"msg_id": f"b{i}", "body": big})
            assert r.status_code == 201
        sizes = []
        for _ in range(3):
            r = c.post("/v1/topics/big/groups/g/receive", json={"max_messages": 1000})
            sizes.append(len(r.json()["messages"]))
        assert sizes == [1, 1, 1]  # each alone is within the cap; two are over it
        for i in range(4):
            r = c.post("/v1/topics/small/messages", json={"msg_id": f"s{i}", "body": "x"})
        r = c.post("/v1/topics/small/groups/g/receive", json={"max_messages": 1000})
        assert len(r.json()["messages"]) == 4


@pytest.mark.parametrize("char", ["\x01", "\n", '"'])
def test_the_receive_cap_counts_the_reply_as_serialized(
    fresh_server: Callable[..., Server], char: str
) -> None:
    """Issue 30.6: a control character escapes to six bytes in JSON (\\u0001), a newline or
    a quote to two: bodies full of them built a 47 MB reply under the 8 MiB cap, which
    counted their stored bytes."""
    cap = 256 * 1024
    srv = fresh_server(ROCKTIMER_MAX_RECEIVE_BYTES=str(cap))
    body = char * (16 * 1024)
    with httpx.Client(base_url=srv.url, timeout=40) as c:
        batch = [{"msg_id": f"m{i}", "body": body} for i in range(40)]
        assert c.post("/v1/topics/esc/messages/batch", json={"messages": batch}).status_code == 200
        got = 0
        while got < len(batch):
            r = c.post("/v1/topics/esc/groups/g/receive", json={"max_messages": 1000})
            n = len(r.json()["messages"])
            assert n >= 1
            assert n == 1 or len(r.content) <= cap, (n, len(r.content))
            got += n
        assert got == len(batch)


@pytest.mark.parametrize("size", [33 * 1024, 64 * 1024, 1024 * 1024])
def test_request_headers_over_32_kib_are_refused(server: Server, size: int) -> None:
    """Issue 10.8: one 64 MiB header was accepted (RSS +128 MB). Whole in one read (counted
    as parsed) or over many (bounded by the bytes read), 431."""
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
    reply = raw_request(server.url, head + b"a" * size + b"\r\n\r\n")
    assert reply.split(b"\r\n", 1)[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
    many = {f"X-H{i}": "a" * 1024 for i in range(40)}  # 40 KiB in small headers
    r = httpx.get(f"{server.url}/healthz", headers=many, timeout=10)
    assert r.status_code == 431
    ok = httpx.get(f"{server.url}/healthz", headers={"X-Fine": "a" * 30 * 1024}, timeout=10)
    assert ok.status_code == 200


class Wire:
    """The socket side of a transport: what was written to it, each write apart."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def test_a_reply_leaves_in_one_write_and_a_streamed_head_at_once() -> None:
    """uvicorn wrote a reply's head and body apart: two sends (each waking the client)
    for every request."""

    async def main() -> None:
        wire = Wire()
        reply = OneWrite(wire)  # type: ignore[arg-type]
        reply.write(b"head")
        reply.write(b"body")
        assert wire.writes == [b"headbody"]
        await asyncio.sleep(0)
        assert wire.writes == [b"headbody"]

        streamed = Wire()
        reply = OneWrite(streamed)  # type: ignore[arg-type]
        reply.write(b"head")  # an event stream's head: its first event may be long coming
        await asyncio.sleep(0)
        assert streamed.writes == [b"head"]
        reply.write(b"event")
        assert streamed.writes == [b"head", b"event"]

        closing = Wire()
        reply = OneWrite(closing)  # type: ignore[arg-type]
        reply.write(b"head")
        reply.close()  # a reply that ends the connection: what it holds goes first
        assert closing.writes == [b"head"]
        assert closing.closed

    asyncio.run(main())


def test_pipelined_replies_keep_their_order(server: Server) -> None:
    """A reply with no body (HEAD) is held until the end of the loop's step: the next
    pipelined request's reply must still come after it."""
    get = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    head = b"HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    last = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    reply = raw_request(server.url, get + head + get + head + last)
    replies = reply.split(b"HTTP/1.1 ")[1:]
    assert [r.split(b"\r\n", 1)[0] for r in replies] == [b"200 OK"] * 5
    bodies = [r.split(b"\r\n\r\n", 1)[1] for r in replies]
    assert bodies[:4] == [b'{"status":"alive"}', b"", b'{"status":"alive"}', b""]
    assert bodies[4].startswith(b'{"status":"ready"')


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_that_arrives_in_pieces_is_read_whole(
    client: httpx.Client, server: Server, topic: str, chunked: bool
) -> None:
    """The hot routes read a body as the messages uvicorn hands over (one per read)."""
    items = [{"msg_id": f"piece{i}", "body": "z" * 100} for i in range(50)]
    body = orjson.dumps({"messages": items})
    cuts = [body[:7], body[7:2_000], body[2_000:]]
    if chunked:
        framing = b"Transfer-Encoding: chunked"
        pieces = [b"%x\r\n%s\r\n" % (len(c), c) for c in cuts] + [b"0\r\n\r\n"]
    else:
        framing, pieces = b"Content-Length: %d" % len(body), cuts
    head = (
        f"POST /v1/topics/{topic}/messages/batch HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
        + b"Content-Type: application/json\r\nConnection: close\r\n"
        + framing
        + b"\r\n\r\n"
    )
    reply = raw_request(server.url, head, *pieces)
    assert reply.startswith(b"HTTP/1.1 200 "), reply[:300]
    results = orjson.loads(reply.split(b"\r\n\r\n", 1)[1])["results"]
    assert [r["status"] for r in results] == [201] * 50
    got = client.get(f"/v1/topics/{topic}/messages/piece49")
    assert got.status_code == 200


def test_a_big_body_in_the_same_read_as_its_headers_is_not_taken_for_headers(
    client: httpx.Client, topic: str
) -> None:
    r = client.post(f"/v1/topics/{topic}/messages", json={"body": "y" * 3 * MiB})
    assert r.status_code == 201


@pytest.mark.parametrize("msg_id", [".", ".."])
def test_unaddressable_msg_ids_are_refused(
    client: httpx.Client, server: Server, topic: str, msg_id: str
) -> None:
    r = client.post(f"/v1/topics/{topic}/messages", json={"msg_id": msg_id, "body": "x"})
    assert_problem(r, 422, "msg_id")
    batch = {"messages": [{"msg_id": msg_id, "body": "x"}]}
    r = client.post(f"/v1/topics/{topic}/messages/batch", json=batch)
    assert r.json()["results"][0]["status"] == 422
    reply = raw_request(
        server.url,
        f"GET /v1/topics/{topic}/messages/{msg_id} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode(),
    )
    assert reply.startswith(b"HTTP/1.1 422 ")


HEAD_TIMEOUT_MS = 1_000
CLOSED_WITHIN_S = 15.0  # the timeout plus room for a machine with a core kept busy


def _read_until_closed(sock: socket.socket, deadline: float) -> bytes:
    """Everything the server sends until it closes; "<still open>" at the deadline."""
    sock.settimeout(max(0.1, deadline - time.monotonic()))
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except TimeoutError:
        return b"<still open>"
    except ConnectionResetError:
        return got or b"<reset>"
    return got


def test_incomplete_request_heads_are_timed_out(fresh_server: Callable[..., Server]) -> None:
    """Issue 30 C8: 1,100 connections holding partial headers stayed open past 60 s. A head
    not complete in time ends its connection (408 if part of it came), however it is sent:
    nothing at all, part of a head, a byte at a time, or after a request on a kept-alive
    connection. A long poll whose head was complete is not cut."""
    srv = fresh_server(ROCKTIMER_HEADER_TIMEOUT_MS=str(HEAD_TIMEOUT_MS))
    partial = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    with contextlib.ExitStack() as stack:

        def connect() -> socket.socket:
            return stack.enter_context(socket.create_connection(("127.0.0.1", srv.port)))

        deadline = time.monotonic() + CLOSED_WITHIN_S
        silent = [connect() for _ in range(10)]
        held = [connect() for _ in range(100)]
        for sock in held:
            sock.sendall(partial)
        kept_alive = connect()
        kept_alive.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert kept_alive.recv(65536).startswith(b"HTTP/1.1 200")
        kept_alive.sendall(partial)
        with httpx.Client(base_url=srv.url, timeout=20) as c:
            wait_ms = 2 * HEAD_TIMEOUT_MS
            poll = c.post("/v1/topics/t/groups/g/receive", json={"wait_ms": wait_ms})
            assert poll.status_code == 200  # its head came at once: the wait is the reply's
            slow, sent = connect(), 0
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                for byte in partial:  # a byte every 200 ms: each read in time, the head late
                    slow.sendall(bytes([byte]))
                    sent += 1
                    time.sleep(0.2)
            assert sent < len(partial), "a head a byte at a time was never cut off"
            replies = [_read_until_closed(sock, deadline) for sock in [*held, kept_alive]]
            quiet = [_read_until_closed(sock, deadline) for sock in silent]
            assert c.get("/healthz").status_code == 200  # the server serves on
    assert {r.split(b"\r\n", 1)[0] for r in replies} == {b"HTTP/1.1 408 Request Timeout"}
    assert b"within 1000 ms" in replies[0]
    assert set(quiet) == {b""}  # sent nothing: closed without a word
