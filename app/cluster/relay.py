"""The hop to a partition's owner: a request for a topic another worker owns is sent to that
worker's private unix socket as HTTP/1.1 (in cluster mode, to the owner node's advertised
address over TCP) and its reply streamed back as it comes.

The reply is relayed a piece at a time (a stream's events, a long poll's late answer), with
the owner's status and headers as they are (less the hop-by-hop ones, which this side's
server sets for its own connection). A client that goes away while a reply is still
streaming closes the upstream connection, which ends the owner's stream.

The connection is app/upstream.py's (shared with the webhooks' client), which parses the
reply with httptools.

An owner that cannot be reached (its worker died and the supervisor is starting it again),
or that goes away before its reply began, is a 503 with Retry-After: never a hang, never
an answer from anyone else. One that goes away in the middle of a reply aborts the
client's connection, so that a cut reply cannot pass for a whole one.

An owner the caller learns is gone while its reply is awaited (``lost``: in cluster mode
its lease passed to another node) is treated as one that went away: a 503 before the reply
began, an aborted connection after (a long poll's or a stream's client sees it end, never
a hang on an owner that is paused or cut off).

Connections are kept alive and reused for a short while (uvicorn closes idle ones after 5
s); a request is never sent twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app import upstream
from app.errors import render
from app.limits import BodyLimit
from storage.errors import PartitionUnavailable

CONNECT_TIMEOUT_S = 1.0  # a unix socket connects at once, or not at all; a LAN peer too
IDLE_REUSE_S = 2.0  # an idle connection is reused this long after its last reply
HIGH_WATER_BYTES = 1024 * 1024  # reply bytes held for a slow client before reading pauses
# Hop-by-hop headers (RFC 9110 §7.6.1) and those each side's server writes itself.
REQUEST_DROPPED = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade", b"expect"}
    | {b"proxy-connection", b"content-length", b"trailer"}
)
REPLY_DROPPED = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"upgrade", b"proxy-connection"}
    | {b"trailer", b"date", b"server"}
)


class OwnerDown(Exception):
    """The owner did not answer: nothing of a reply reached the client."""


class ClientGone(Exception):
    """The client went away before its request's body was read: nothing to answer."""


class _Upstream(upstream.Upstream):
    """A connection to the owner, one request at a time; its reply's body is kept as it
    comes (reading paused past HIGH_WATER_BYTES) and every change wakes the relay."""

    def __init__(self, relay: Relay) -> None:
        self.waiter: asyncio.Future[None] | None = None
        self.idle_since = 0.0
        super().__init__(relay)

    def begin(self, *, head_only: bool = False) -> None:
        super().begin(head_only=head_only)
        self.body: list[bytes] = []
        self.buffered = 0

    # --- asyncio.Protocol -----------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.buffered > HIGH_WATER_BYTES and self.transport is not None:
            self.transport.pause_reading()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self.done:
            self.failed = True
        self._wake()

    # --- httptools callbacks --------------------------------------------------------------

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.buffered += len(body)

    # --------------------------------------------------------------------------------------

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def changed(self, *also: asyncio.Future[Message] | asyncio.Future[None]) -> None:
        """Until more of the reply (or its end, or a failure) arrived, or one of ``also`` is
        done."""
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            if not also:
                await self.waiter
            else:
                await asyncio.wait((self.waiter, *also), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.waiter = None

    def take_body(self) -> bytes:
        chunk = b"".join(self.body)
        self.body.clear()
        if self.buffered > HIGH_WATER_BYTES and self.transport is not None and not self.closed:
            self.transport.resume_reading()
        self.buffered = 0
        return chunk


def request_head(
    scope: Scope, body_length: int, extra: Sequence[tuple[bytes, bytes]] = ()
) -> bytes:
    """The request's line and headers, less the hop-by-hop ones; ``extra`` replaces the
    client's headers of the same names (the hop's own marks, app/cluster/node.py)."""
    target = scope.get("raw_path") or scope["path"].encode()
    if scope["query_string"]:
        target += b"?" + scope["query_string"]
    dropped = REQUEST_DROPPED.union(n for n, _ in extra) if extra else REQUEST_DROPPED
    lines = [b"%s %s HTTP/1.1" % (scope["method"].encode(), target)]
    lines += [b"%s: %s" % (n, v) for n, v in scope["headers"] if n not in dropped]
    lines += [b"%s: %s" % (n, v) for n, v in extra]
    lines.append(b"content-length: %d\r\n\r\n" % body_length)
    return b"\r\n".join(lines)


async def read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGone
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def request_body(
    limit: BodyLimit, scope: Scope, receive: Receive, send: Send
) -> bytes | None:
    """The request's body, under ``limit``; None once answered (over the limit: the
    owner's own 413) or when the client went away."""
    try:
        limit.check(scope)
        return await read_body(limit.counted(receive))
    except ClientGone:
        return None
    except Exception as exc:
        await render(exc)(scope, receive, send)
        return None


def unavailable(what: str) -> Response:
    return render(
        PartitionUnavailable(
            f"{what} is not served right now (its owner is starting or moving); retry"
        )
    )


class Relay(upstream.Pool[_Upstream]):
    """Requests to one owner: a worker over its unix socket (``address`` a path), or a
    node over TCP (``address`` a ``(host, port)``)."""

    def __init__(self, address: str | tuple[str, int], limit: BodyLimit) -> None:
        super().__init__()
        self.address = address
        self.limit = limit  # the owner's own limit, applied before the body is buffered

    async def _take(self) -> _Upstream:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < IDLE_REUSE_S:
                return conn
            conn.close()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                if isinstance(self.address, str):
                    _, conn = await loop.create_unix_connection(
                        lambda: _Upstream(self), self.address
                    )
                else:
                    _, conn = await loop.create_connection(lambda: _Upstream(self), *self.address)
        except (OSError, TimeoutError) as exc:
            raise OwnerDown(f"cannot reach {self.address}: {exc}") from None
        return conn

    async def _send(
        self, scope: Scope, request: bytes, lost: asyncio.Future[None] | None
    ) -> _Upstream:
        """A connection to the owner, ``request`` written on it."""
        if lost is not None and lost.done():
            raise OwnerDown("the owner is gone")
        conn = await self._take()
        conn.begin(head_only=scope["method"] == "HEAD")
        assert conn.transport is not None
        conn.transport.write(request)
        return conn

    async def forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        headers: Sequence[tuple[bytes, bytes]] = (),
        lost: asyncio.Future[None] | None = None,
    ) -> None:
        """Relay one request and its reply; OwnerDown if no reply began (nothing was sent
        to the client then). ``headers``: added to the request's; ``lost``: done when the
        owner is known to be gone (its reply is not waited for any longer)."""
        body = await request_body(self.limit, scope, receive, send)
        if body is None:
            return
        conn = await self._send(scope, request_head(scope, len(body), headers) + body, lost)
        started = False
        gone: asyncio.Future[Message] | None = None  # the client's disconnect, once streaming
        try:
            while True:
                if not (conn.failed or conn.done or conn.body or (conn.head_done and not started)):
                    if started and gone is None:
                        gone = asyncio.ensure_future(receive())
                    await conn.changed(*(f for f in (gone, lost) if f is not None))
                    if gone is not None and gone.done():
                        conn.close()  # the owner ends its side (a stream closes)
                        return
                    if lost is not None and lost.done():
                        conn.failed = True  # as if it had closed the connection
                        conn.close()
                    continue
                if conn.failed and not started:
                    conn.close()
                    raise OwnerDown("the owner closed the connection before replying")
                if conn.head_done and not started:
                    headers = [(n, v) for n, v in conn.headers if n not in REPLY_DROPPED]
                    start = {"type": "http.response.start", "status": conn.status}
                    await send({**start, "headers": headers})
                    started = True
                chunk = conn.take_body()
                if conn.done:
                    await send({"type": "http.response.body", "body": chunk, "more_body": False})
                    break
                if conn.failed:  # mid-reply: abort the client's connection, not end it
                    raise ConnectionError("the owner went away in the middle of a reply")
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except BaseException:
            conn.close()
            raise
        finally:
            if gone is not None:
                gone.cancel()
        if conn.keep_alive and not conn.closed:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()
