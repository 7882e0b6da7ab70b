"""uvicorn's httptools protocol with a bound on request headers, and replies in one write.

httptools keeps every header byte it is fed until the headers end, with no limit: one
64 MiB header took 128 MB of RSS. This refuses a request whose request line and headers
pass MAX_HEADER_BYTES in all with 431, closing the connection. Headers still incomplete
are bounded by the bytes read while they last (a read is at most 256 KiB); complete ones
are counted exactly as the parser handed them over, but only when those bytes passed the
bound (the head is a part of them): a request pays for two callbacks, not one per header.

A request line and headers must also arrive in time: uvicorn times out a connection only
while it is idle between requests, so one that sent part of a head (or nothing) stayed
open for good, a slow-loris holding a file descriptor and a parser each. A head not
complete ``head_timeout_s`` after its first byte (for a new connection: after it was
made) ends the connection: 408 if any byte of it came, a plain close if none did. The
timing is one timer per connection that checks a deadline when it fires, re-armed as
needed: a request pays a clock read, not a timer of its own.

uvicorn writes a reply's head and its body to the socket apart: two sends, each waking
the client, for every request. A reply's first write is held until its next one or the
end of the loop's step (OneWrite), so a plain reply (head, then the body at once) leaves
in one send and a streamed one's head still leaves at once. Replies stay in order: the
next pipelined request's reply is written from a task scheduled after this flush.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.errors import HeadersTooLarge, HeadTimeout, render, status_of
from storage.errors import RocktimerError

MAX_HEADER_BYTES = 32 * 1024  # request line + headers, all of them (api.md, Edges)
HEAD_TIMEOUT_MS = 10_000  # ROCKTIMER_HEADER_TIMEOUT_MS's default


def raw_reply(error: RocktimerError) -> bytes:
    """The one table's reply to ``error``, whole, as the bytes written straight to the
    socket: no ASGI cycle runs for a request whose head never completed."""
    reply = render(error)
    return (
        f"HTTP/1.1 {reply.status_code} {status_of(error)[1]}\r\n".encode()
        + b"".join(name + b": " + value + b"\r\n" for name, value in reply.raw_headers)
        + b"\r\n"
        + bytes(reply.body)
    )


_DETAIL = f"request headers over {MAX_HEADER_BYTES} bytes in all"
TOO_LARGE = raw_reply(HeadersTooLarge(_DETAIL))


def _too_late(timeout_ms: int) -> bytes:
    return raw_reply(HeadTimeout(f"request line and headers not complete within {timeout_ms} ms"))


class OneWrite:
    """A reply's transport (as uvicorn's RequestResponseCycle uses it) that sends its first
    write with the next one, or at the end of this step of the loop if none comes."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: bytes | None = None
        self._first = True

    def write(self, data: bytes) -> None:
        if self._first:
            self._first = False
            self._held = data
            asyncio.get_running_loop().call_soon(self.flush)
        elif self._held is not None:
            data, self._held = self._held + data, None
            self._transport.write(data)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        if self._held is not None:
            data, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedHeaders(HttpToolsProtocol):
    head_timeout_s = HEAD_TIMEOUT_MS / 1000
    too_late = _too_late(HEAD_TIMEOUT_MS)

    @classmethod
    def with_head_timeout(cls, timeout_ms: int) -> type[BoundedHeaders]:
        """This protocol with its own head timeout (uvicorn makes one per connection)."""
        timing = {"head_timeout_s": timeout_ms / 1000, "too_late": _too_late(timeout_ms)}
        return type(cls.__name__, (cls,), timing)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._in_head = True  # between requests, or inside a request line and its headers
        self._read_in_head = 0  # bytes read while in the head (a bound for partial headers)
        self._refused = False
        self._head_since: float | None = None  # loop time a head began; None: none under way
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_since = self.loop.time()  # a new connection owes its first head
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._check_head)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _check_head(self) -> None:
        """The connection's timer: end it if its head is overdue, else wait again."""
        self._head_timer = None
        if self.transport.is_closing():
            return
        now, since = self.loop.time(), self._head_since
        answering = self.cycle is not None and not self.cycle.response_complete
        if since is None or answering:  # no head under way, or a reply first (pipelining)
            wait = self.head_timeout_s
        elif (wait := since + self.head_timeout_s - now) <= 0:
            self._time_out()
            return
        self._head_timer = self.loop.call_later(wait, self._check_head)

    def _time_out(self) -> None:
        if self._read_in_head:  # part of a head came: say why it ends
            self.transport.write(self.too_late)
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        if self._in_head:
            if self._head_since is None:  # the first bytes of a head
                self._head_since = self.loop.time()
            if self._read_in_head > MAX_HEADER_BYTES:  # earlier reads never ended the head
                self._refuse()
                return
            self._read_in_head += len(data)
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        if self._refused:
            self._refuse()
        else:
            super().send_400_response(msg)

    def _refuse(self) -> None:
        self._refused = True
        self.logger.warning("refused a request: %s", _DETAIL)
        self.transport.write(TOO_LARGE)
        self.transport.close()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_since = None
        if self._read_in_head > MAX_HEADER_BYTES and self._head_size() > MAX_HEADER_BYTES:
            self._refused = True
            # From a parser callback, httptools stops: uvicorn's 400 path, above.
            raise HeadersTooLarge(_DETAIL)
        super().on_headers_complete()
        self.cycle.transport = OneWrite(self.transport)  # type: ignore[assignment]

    def _head_size(self) -> int:
        """The request line's URL and the headers, as the parser handed them over."""
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def on_message_complete(self) -> None:
        self._in_head = True
        self._read_in_head = 0
        super().on_message_complete()
