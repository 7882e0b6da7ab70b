"""The one place errors become HTTP: every error reply is application/problem+json."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import BaseRoute, Match

from storage.errors import (
    CorruptRecordError,
    DiskFullError,
    MessageConflict,
    MessageNotFound,
    Overloaded,
    PartitionUnavailable,
    RocktimerError,
    StorageError,
    WriterStopped,
)

log = logging.getLogger("rocktimer.app")

PROBLEM = "application/problem+json"
UNEXPECTED = "an unexpected error occurred"
UNAVAILABLE = "the store cannot serve this at the moment; retry later"


# --- errors only a request makes: the tree's HTTP branch --------------------------------


class InvalidInput(RocktimerError):
    """The request is well-formed HTTP but a field is wrong (422)."""

    def __init__(self, detail: str, errors: list[dict[str, Any]]) -> None:
        super().__init__(detail)
        self.errors = errors


class MalformedJson(InvalidInput):
    """The body is not JSON at all (400)."""


class UnsupportedMediaType(RocktimerError):
    """A body that says it is not JSON (415)."""


class PayloadTooLarge(RocktimerError):
    """A body or a whole request over its configured limit (413)."""


class DeclaredTooLarge(PayloadTooLarge):
    """A request whose Content-Length is over the limit: refused before its body is read,
    so the connection is closed rather than left to drain it (413)."""


class HeadersTooLarge(RocktimerError):
    """The request line and headers over their bound in all (431; app/http.py)."""


class HeadTimeout(RocktimerError):
    """The request line and headers not complete in time (408; app/http.py)."""


class Unauthorized(RocktimerError):
    """No API key, or one we do not know (401)."""


class Forbidden(RocktimerError):
    """A known API key whose role may not call this (403)."""


class Misdirected(RocktimerError):
    """Without API keys, a Host that is not a name of this service (421; app/origin.py)."""


class NotReady(RocktimerError):
    """The store or a worker is not running: /readyz says so (503)."""


class PartitionsNotServed(NotReady):
    """A worker (node) does not serve its partitions right now: /readyz says which, with
    every process's state as the problem's ``members`` (503 + Retry-After)."""

    def __init__(self, detail: str, members: Mapping[str, Any]) -> None:
        super().__init__(detail)
        self.members = members


class Reply(NamedTuple):
    status: int
    title: str
    detail: str | None  # what the client reads; None: the error's own message (ours to show)
    headers: Mapping[str, str] = MappingProxyType({})
    logged: bool = True  # a 5xx is logged, unless it is an expected answer (readiness)


RETRY_SOON = MappingProxyType({"Retry-After": "1"})
CLOSE = MappingProxyType({"Connection": "close"})

# Each class of the tree (storage/errors.py, and the HTTP branch above) → its reply. An
# error gets the entry of the most specific class in its MRO, so a subclass never depends
# on where it is listed.
REPLIES: dict[type[Exception], Reply] = {
    RocktimerError: Reply(500, "Internal Server Error", UNEXPECTED),
    InvalidInput: Reply(422, "Unprocessable Content", None),
    MalformedJson: Reply(400, "Bad Request", None),
    Unauthorized: Reply(401, "Unauthorized", None, {"WWW-Authenticate": "Bearer"}),
    Forbidden: Reply(403, "Forbidden", None),
    MessageNotFound: Reply(404, "Not Found", None),
    MessageConflict: Reply(409, "Conflict", None),
    PayloadTooLarge: Reply(413, "Payload Too Large", None),
    DeclaredTooLarge: Reply(413, "Payload Too Large", None, CLOSE),
    UnsupportedMediaType: Reply(415, "Unsupported Media Type", None),
    Misdirected: Reply(421, "Misdirected Request", None),
    Overloaded: Reply(429, "Too Many Requests", None),
    HeadersTooLarge: Reply(431, "Request Header Fields Too Large", None, CLOSE),
    HeadTimeout: Reply(408, "Request Timeout", None, CLOSE),
    WriterStopped: Reply(503, "Service Unavailable", None, RETRY_SOON),
    StorageError: Reply(503, "Service Unavailable", UNAVAILABLE, RETRY_SOON),
    DiskFullError: Reply(503, "Service Unavailable", None, RETRY_SOON),
    NotReady: Reply(503, "Service Unavailable", None, logged=False),
    PartitionsNotServed: Reply(503, "Service Unavailable", None, RETRY_SOON, logged=False),
    PartitionUnavailable: Reply(503, "Service Unavailable", None, RETRY_SOON, logged=False),
    CorruptRecordError: Reply(500, "Internal Server Error", UNEXPECTED),
}
_UNKNOWN = Reply(500, "Internal Server Error", UNEXPECTED)


def reply_of(exc: BaseException) -> Reply:
    for cls in type(exc).__mro__:
        found = REPLIES.get(cls)
        if found is not None:
            return found
    return _UNKNOWN


def status_of(exc: BaseException) -> tuple[int, str]:
    found = reply_of(exc)
    return found.status, found.title


def public_detail(exc: BaseException) -> str:
    """What a client may read about ``exc``: never an internal message."""
    found = reply_of(exc)
    return str(exc) if found.detail is None else found.detail


def problem(
    status: int,
    title: str,
    detail: str,
    errors: Sequence[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
    more: Mapping[str, Any] | None = None,
) -> Response:
    """An RFC 9457 problem document; ``more``: its extension members."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        **(more or {}),
    }
    if errors:
        body["errors"] = list(errors)
    return Response(orjson.dumps(body), status_code=status, media_type=PROBLEM, headers=headers)


MAX_FIELD_ERRORS = 20  # listed per problem: 10k bad fields must not make a 1 MB reply


def field_errors(raw: Sequence[Any], prefix: Sequence[str | int] = ()) -> list[dict[str, Any]]:
    """Pydantic/FastAPI error dicts → ``{loc, field, reason}`` naming each bad field (the
    first MAX_FIELD_ERRORS; a last entry counts the rest)."""
    out = []
    for err in raw[:MAX_FIELD_ERRORS]:
        loc = [*prefix, *(p for p in err.get("loc", ()) if p != "__root__")]
        named = [str(p) for p in loc if not isinstance(p, int)]
        field = (
            ".".join(str(p) for p in loc[1:]) if len(loc) > 1 else (named[-1] if named else "body")
        )
        reason = str(err.get("msg", "invalid")).removeprefix("Value error, ")  # our own words
        out.append({"loc": loc, "field": field or "body", "reason": reason})
    if len(raw) > MAX_FIELD_ERRORS:
        more = len(raw) - MAX_FIELD_ERRORS
        out.append({"loc": list(prefix), "field": "body", "reason": f"and {more} more errors"})
    return out


def invalid(exc: ValidationError, prefix: Sequence[str | int] = ("body",)) -> InvalidInput:
    """A pydantic error on a request body → InvalidInput (400 for JSON that does not parse)."""
    raw = exc.errors(include_url=False, include_input=False)
    broken = any(e["type"] == "json_invalid" for e in raw)
    errors = field_errors(raw, prefix)
    detail = "; ".join(f"{e['field']}: {e['reason']}" for e in errors)
    return (MalformedJson if broken else InvalidInput)(detail, errors)


def _summary(errors: list[dict[str, Any]]) -> str:
    return "; ".join(f"{e['field']}: {e['reason']}" for e in errors)


def flat_routes(routes: Sequence[Any]) -> list[BaseRoute]:
    """The routes of the app and of every included router (FastAPI wraps those)."""
    out: list[BaseRoute] = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            out += flat_routes(inner.routes)
        elif isinstance(route, BaseRoute):
            out.append(route)
    return out


def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method some route serves at this path (RFC 9110: Allow lists them all);
    starlette names only the first route's, and GET and PUT of a group are two routes."""
    methods: set[str] = set()
    for route in flat_routes(app.router.routes):
        if route.matches(request.scope)[0] is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


def render(exc: Exception) -> Response:
    """The problem document of any error (the one mapping of errors to HTTP): ours by
    REPLIES, anything else a 500 that says nothing of its cause (logged here)."""
    if not isinstance(exc, RocktimerError):
        log.error("unhandled error", exc_info=exc)
        return problem(500, _UNKNOWN.title, UNEXPECTED)
    found = reply_of(exc)
    if found.status >= 500 and found.logged:
        log.log(
            logging.WARNING if found.status == 503 else logging.ERROR,
            "%s: %s",
            type(exc).__name__,
            exc,
        )
    headers = dict(found.headers)
    if isinstance(exc, Overloaded):
        headers["Retry-After"] = str(exc.retry_after_s)
    errors = exc.errors if isinstance(exc, InvalidInput) else None
    more = exc.members if isinstance(exc, PartitionsNotServed) else None
    return problem(found.status, found.title, public_detail(exc), errors, headers or None, more)


def install(app: FastAPI) -> None:
    """Register the handlers that turn every exception into a problem document."""

    @app.exception_handler(RocktimerError)
    async def _ours(_: Request, exc: RocktimerError) -> Response:
        return render(exc)

    # Starlette runs an Exception handler as its last resort, outside the other handlers.
    @app.exception_handler(Exception)
    async def _any(_: Request, exc: Exception) -> Response:
        return render(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> Response:
        errors = field_errors(exc.errors())
        return problem(422, "Unprocessable Content", _summary(errors), errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        detail = exc.detail if isinstance(exc.detail, str) else "error"
        title = {404: "Not Found", 405: "Method Not Allowed"}.get(exc.status_code, "Error")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(app, request))
        return problem(exc.status_code, title, detail, headers=headers)
