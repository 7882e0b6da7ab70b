"""uvicorn's httptools protocol with a bound on request headers.

httptools keeps every header byte it is fed until the headers end, with no limit: one
64 MiB header took 128 MB of RSS. This counts what arrives before the end of the headers
and answers 431 (closing the connection) once it passes MAX_HEADER_BYTES in all.
"""

from __future__ import annotations

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEADER_BYTES = 32 * 1024  # request line + headers, all of them (api.md, Edges)

_DETAIL = f"request headers over {MAX_HEADER_BYTES} bytes in all"
_BODY = orjson.dumps(
    {
        "type": "about:blank",
        "title": "Request Header Fields Too Large",
        "status": 431,
        "detail": _DETAIL,
    }
)
TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: application/problem+json\r\n"
    b"content-length: " + str(len(_BODY)).encode() + b"\r\n"
    b"connection: close\r\n\r\n" + _BODY
)


class BoundedHeaders(HttpToolsProtocol):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._in_head = True  # between requests, or inside a request line and its headers
        self._head_bytes = 0

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        # Checked after the parser had it: a read that ends the headers and carries the
        # body with it is not headers, whatever its size.
        if self._in_head and self._head_bytes > MAX_HEADER_BYTES:
            self.logger.warning("refused a request: %s", _DETAIL)
            self.transport.write(TOO_LARGE)
            self.transport.close()

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_head = True
        self._head_bytes = 0
        super().on_message_complete()
