"""The service's HTTP/1.1 client connections: the webhooks' POSTs (app/push/client.py) and
the hop of a request to its partition's owner (app/cluster/relay.py).

Each is an asyncio protocol fed by httptools' C parser (uvicorn's), one request at a time
on a connection, kept alive and reused by its pool. ``Upstream`` holds what the two share:
the parser and its callbacks, which read a reply's status, headers and end into the
connection (an interim 1xx reply is skipped: the real one follows), its state for one
request (``begin``), and its close; each client adds what it does with a reply's bytes
as they come. ``Pool`` holds the idle connections, each forgotten once its close arrives.
"""

from __future__ import annotations

import asyncio
from typing import Generic, Protocol, TypeVar, cast

import httptools


class Forgets(Protocol):
    def forget(self, conn: Upstream) -> None: ...


class Upstream(asyncio.Protocol):
    """One connection to a server, one request at a time; httptools parses the reply."""

    def __init__(self, pool: Forgets) -> None:
        self.pool = pool
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.begin()

    def begin(self, *, head_only: bool = False) -> None:
        """Ready for the reply to a new request; ``head_only``: a HEAD's, which has headers
        only, whatever they say."""
        self.head_only = head_only
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []  # names lowercased, as they came
        self.head_done = False
        self.done = False
        self.keep_alive = True
        self.failed = False  # the reply cannot be read (any more)
        self.error: httptools.HttpParserError | None = None

    def header(self, name: bytes) -> bytes | None:
        """The reply's last header ``name`` (lowercase), if it has one."""
        found = None
        for n, v in self.headers:
            if n == name:
                found = v
        return found

    # --- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: no subclass of it

    def data_received(self, data: bytes) -> None:
        """Feed the parser; what is not HTTP fails the reply and closes the connection."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = exc
            self.failed = True
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)

    # --- httptools callbacks --------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.status < 200:  # an interim reply (100 Continue): its end starts over
            return
        self.keep_alive = self.parser.should_keep_alive()
        self.head_done = True
        if self.head_only:
            self.done = True
            self.keep_alive = False  # the parser would wait for a body that never comes

    def on_message_complete(self) -> None:
        if not self.head_done:  # the end of an interim reply: the real one follows
            self.status = 0
            self.headers = []
            return
        self.done = True

    # --------------------------------------------------------------------------------------

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


C = TypeVar("C", bound=Upstream)


class Pool(Generic[C]):
    """The idle connections to one server."""

    def __init__(self) -> None:
        self._idle: list[C] = []

    def forget(self, conn: Upstream) -> None:
        if conn in self._idle:
            self._idle.remove(conn)

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
