"""uvicorn's httptools protocol with a bound on request headers, and replies in one write.

httptools keeps every header byte it is fed until the headers end, with no limit: one
64 MiB header took 128 MB of RSS. This refuses a request whose request line and headers
pass MAX_HEADER_BYTES in all with 431, closing the connection. Headers still incomplete
are bounded by the bytes read while they last (a read is at most 256 KiB); complete ones
are counted exactly as the parser handed them over, but only when those bytes passed the
bound (the head is a part of them): a request pays for two callbacks, not one per header
(figure 1).

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

from app.errors import HeadersTooLarge, render

MAX_HEADER_BYTES = 32 * 1024  # request line + headers, all of them (api.md, Edges)

_DETAIL = f"request headers over {MAX_HEADER_BYTES} bytes in all"
# Written straight to the socket (no ASGI cycle runs for it): the one table's reply, as bytes.
_REPLY = render(HeadersTooLarge(_DETAIL))
TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    + b"".join(name + b": " + value + b"\r\n" for name, value in _REPLY.raw_headers)
    + b"\r\n"
    + bytes(_REPLY.body)
)


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
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._in_head = True  # between requests, or inside a request line and its headers
        self._read_in_head = 0  # bytes read while in the head (a bound for partial headers)
        self._refused = False

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        if self._in_head:
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
        if self._read_in_head > MAX_HEADER_BYTES and self._head_size() > MAX_HEADER_BYTES:
            self._refused = True
            raise HeadersTooLarge(
                _DETAIL
            )  # from a parser callback, httptools stops: uvicorn's 400 path, above
        super().on_headers_complete()
        self.cycle.transport = OneWrite(self.transport)  # type: ignore[assignment]

    def _head_size(self) -> int:
        """The request line's URL and the headers, as the parser handed them over."""
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def on_message_complete(self) -> None:
        self._in_head = True
        self._read_in_head = 0
        super().on_message_complete()
