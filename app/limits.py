"""Request bodies over the configured size (413), a gate of the front door
(app/front.py); and HEAD, a middleware of the FastAPI app.

The limit checks Content-Length up front and counts streamed bytes for chunked bodies, so
an oversize request is refused before it is buffered in memory.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import DeclaredTooLarge, PayloadTooLarge


class BodyLimit:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    def check(self, scope: Scope) -> None:
        """Raise DeclaredTooLarge (413) for a request whose Content-Length is over the limit."""
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    raise DeclaredTooLarge(
                        f"request body of {declared} bytes is over the {self.max_bytes} byte limit"
                    )

    def counted(self, receive: Receive) -> Receive:
        """``receive`` that raises PayloadTooLarge once the body passes the limit (a
        chunked body declares no length)."""
        limit = self.max_bytes
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise PayloadTooLarge(f"request body over the {limit} byte limit")
            return message

        return counted


HEAD_KEY = "rocktimer.head"  # set on a HEAD request run as GET (a stream must not start)


class HeadAsGet:
    """HEAD wherever GET is served (RFC 9110 §9.1), without a second OpenAPI operation:
    the request runs as GET and the body is dropped, headers kept."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET", HEAD_KEY: True}, receive, headers_only)
