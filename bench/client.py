"""A lean HTTP/1.1 keep-alive client on asyncio, the load generator of every figure.

Why not httpx: on this 2-core machine the load generator shares the CPU with the server,
and httpx spends several times more CPU per request than the bare FastAPI app it would be
measuring. This client writes pre-built request bytes and parses only the status line and
Content-Length, so nearly all of the machine's time goes to the server under test, and the
same client drives both the service and its ceiling (the bare app).

One request at a time per connection (no pipelining), as a real keep-alive client does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import orjson

CONNECT_TIMEOUT_S = 5.0
HEADER_END = b"\r\n\r\n"

T = TypeVar("T")


class HttpError(Exception):
    """The server broke the protocol, closed the connection, or answered unexpectedly."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    done_ns: int  # time.perf_counter_ns() when the last byte arrived
    done_wall_ns: int  # time.time_ns() at the same moment (to compare with server times)
    retry_after_s: float = 0.0  # the Retry-After header of a 429 or 503, in seconds

    def json(self) -> Any:
        return orjson.loads(self.body)


def build_request(
    method: str, host: str, path: str, body: bytes | None = None, *, json: Any = None
) -> bytes:
    """The bytes of one request; build once and send many times where the body repeats."""
    if json is not None:
        body = orjson.dumps(json)
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + (body or b"")


class Connection(asyncio.Protocol):
    """One keep-alive connection; ``send`` one request and await its whole response."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Response] | None = None
        self._body_len: int | None = None
        self._status = 0
        self._retry_after_s = 0.0
        self._lost: BaseException | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(cls, host, port), timeout=CONNECT_TIMEOUT_S
        )
        return conn

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc or HttpError("the server closed the connection")
        self._transport = None
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(self._lost)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._body_len is None:
            end = self._buffer.find(HEADER_END)
            if end < 0:
                return
            try:
                self._parse_head(bytes(self._buffer[:end]))
            except (HttpError, ValueError) as exc:
                self._fail(exc)
                return
            del self._buffer[: end + len(HEADER_END)]
        assert self._body_len is not None
        if len(self._buffer) < self._body_len:
            return
        body = bytes(self._buffer[: self._body_len])
        del self._buffer[: self._body_len]
        response = Response(
            self._status, body, time.perf_counter_ns(), time.time_ns(), self._retry_after_s
        )
        self._body_len = None
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

    def _fail(self, exc: BaseException) -> None:
        """A response we cannot read: fail the request and drop the connection."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        try:
            self._status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise HttpError(f"bad status line {lines[0]!r}") from None
        length = 0
        self._retry_after_s = 0.0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"retry-after":
                self._retry_after_s = float(value)  # the service sends seconds, never a date
            elif name == b"transfer-encoding":
                raise HttpError("chunked responses are not supported by the bench client")
        self._body_len = length

    # --- use -----------------------------------------------------------------------------

    def send(self, request: bytes) -> asyncio.Future[Response]:
        """Write one request; the future completes with its response."""
        if self._transport is None:
            raise self._lost or HttpError("connection is not open")
        if self._waiter is not None:
            raise HttpError("one request at a time on a connection")
        waiter: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        self._transport.write(request)
        return waiter

    async def request(self, request: bytes, timeout_s: float) -> Response:
        return await asyncio.wait_for(self.send(request), timeout=timeout_s)

    @property
    def is_open(self) -> bool:
        return self._transport is not None

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None


class Client:
    """One connection for sequential calls (JSON in, JSON out), reopened when it was closed."""

    def __init__(self, host: str, port: int, timeout_s: float = 60.0) -> None:
        self.host = host
        self.port = port
        self.authority = f"{host}:{port}"
        self.timeout_s = timeout_s
        self._conn: Connection | None = None

    async def call(self, method: str, path: str, json: Any = None) -> Response:
        raw = build_request(method, self.authority, path, json=json)
        return await self.send(raw)

    async def send(self, raw: bytes) -> Response:
        reused = self._conn is not None and self._conn.is_open
        if self._conn is None or not self._conn.is_open:  # uvicorn closes idle ones after 5 s
            self._conn = await Connection.open(self.host, self.port)
        try:
            return await self._conn.request(raw, self.timeout_s)
        except HttpError:
            self.close()
            # An idle keep-alive connection the server closed just as we wrote: a GET
            # (no side effect) is sent again on a new connection.
            if reused and raw.startswith(b"GET "):
                return await self.send(raw)
            raise
        except BaseException:
            self.close()  # a timed-out or broken connection cannot be reused
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine on uvloop (as the server does), so both sides use the same loop."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())
