"""The webhooks' HTTP client: HTTP/1.1 POSTs over a pool of keep-alive connections, one
request per connection at a time, each request written in one piece.

Why not httpx (a dependency anyway): against a local receiver it managed ~60 POSTs/s, its
headers and body leaving in two writes that Nagle and delayed ACKs hold up, and at best
some thousands per second of pure-Python work per request; a push group needs ~10,000/s.
This is an asyncio protocol fed by httptools' C parser (uvicorn's; app/upstream.py, shared
with the hop to a partition's owner), reading the status and the headers a push needs;
replies' bodies are dropped.

A connection the receiver closed while idle is dropped from the pool when its close
arrives; one that fails before any byte of its reply, when it was reused, is retried once
on a new connection (the receiver read nothing of it: it timed the connection out).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import NamedTuple
from urllib.parse import urlsplit

from app import upstream

MAX_REPLY_HEAD_BYTES = 64 * 1024  # status line and headers of a reply; more is an error
USER_AGENT = "rocktimer-push/1"


class Reply(NamedTuple):
    status: int
    retry_after: str | None


class ReplyError(ConnectionError):
    """The receiver closed the connection or sent what is not an HTTP/1.x reply."""


class _Connection(upstream.Upstream):
    """A connection to the receiver; a request's reply wakes its waiter, a reply cut off
    before its head ended or not HTTP fails it."""

    def __init__(self, pool: Pool) -> None:
        self.waiter: asyncio.Future[Reply] | None = None
        super().__init__(pool)

    def begin(self, *, head_only: bool = False) -> None:
        super().begin(head_only=head_only)
        self.head_bytes = 0
        self.got_bytes = False

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        if not self.head_done:
            self.head_bytes += len(data)
            if self.head_bytes > MAX_REPLY_HEAD_BYTES:
                self._fail(ReplyError(f"reply head over {MAX_REPLY_HEAD_BYTES} bytes"))
                return
        super().data_received(data)
        if self.done:  # bytes after its end that are not HTTP close the connection only
            self._done()
        if self.error is not None:
            self._fail(ReplyError(f"not an HTTP reply: {self.error}"))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.head_done:  # a reply delimited by the close itself
            self._done()
        else:
            self._fail(ReplyError("the receiver closed the connection"))

    def on_message_complete(self) -> None:
        if not self.head_done:  # an interim reply: the real one's head is bounded anew
            self.head_bytes, self.got_bytes = 0, False
        super().on_message_complete()

    def _done(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            retry_after = self.header(b"retry-after")
            self.waiter.set_result(
                Reply(self.status, None if retry_after is None else retry_after.decode("latin-1"))
            )

    def _fail(self, exc: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)
        self.close()

    async def request(self, data: bytes) -> Reply:
        assert self.transport is not None
        self.begin()
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        try:
            return await self.waiter
        finally:
            self.waiter = None


class Pool(upstream.Pool[_Connection]):
    """POSTs to one URL over at most as many connections as there are POSTs at once."""

    def __init__(self, url: str) -> None:
        super().__init__()
        parts = urlsplit(url)
        self.host = parts.hostname or ""
        self.tls = parts.scheme == "https"
        if not self.host or parts.port == 0:
            raise ValueError(f"not a push url: {url!r}")
        self.port = parts.port or (443 if self.tls else 80)
        default_port = parts.port is None or parts.port == (443 if self.tls else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        authority = host if default_port else f"{host}:{self.port}"
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._head = (
            f"POST {target} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: {USER_AGENT}\r\n"
            "Content-Type: application/json\r\n"
        ).encode("ascii")  # a push url is ASCII (workers/rules/webhook.py, push_url); else raises
        self._ssl = ssl.create_default_context() if self.tls else None

    async def post(self, body: bytes, headers: dict[str, str], timeout_s: float) -> Reply:
        """POST ``body``; the reply's status and Retry-After, or OSError / TimeoutError."""
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        data = b"%sContent-Length: %d\r\n%s\r\n%s" % (
            self._head,
            len(body),
            extra.encode("latin-1"),
            body,
        )
        async with asyncio.timeout(timeout_s):
            while self._idle:
                conn = self._idle.pop()
                if conn.closed:
                    continue
                try:
                    return await self._use(conn, data)
                except ReplyError:
                    if conn.got_bytes:
                        raise
                    # Reused and closed before any reply: the receiver timed it out.
            return await self._use(await self._connect(), data)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(
            lambda: _Connection(self), self.host, self.port, ssl=self._ssl
        )
        return conn

    async def _use(self, conn: _Connection, data: bytes) -> Reply:
        try:
            reply = await conn.request(data)
        except BaseException:  # a timeout or a cancel mid-request leaves it unusable
            conn.close()
            raise
        if conn.keep_alive and not conn.closed:
            self._idle.append(conn)
        else:
            conn.close()
        return reply
