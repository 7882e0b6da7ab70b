"""The one place errors become HTTP: every error reply is application/problem+json."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import BaseRoute, Match

from storage.errors import RocktimerError, StorageError
from workers.errors import MessageConflict, MessageNotFound
from workers.writer import Overloaded, WriterStopped

log = logging.getLogger("rocktimer.app")

PROBLEM = "application/problem+json"


class InvalidInput(RocktimerError):
    """The request is well-formed HTTP but a field is wrong (422) or the JSON is broken (400)."""

    def __init__(self, detail: str, errors: list[dict[str, Any]], status: int = 422) -> None:
        super().__init__(detail)
        self.errors = errors
        self.status = status


class UnsupportedMediaType(RocktimerError):
    """A body that says it is not JSON (415)."""


class PayloadTooLarge(RocktimerError):
    """A body or a whole request over its configured limit (413)."""


class Unauthorized(RocktimerError):
    """No API key, or one we do not know (401)."""


class Forbidden(RocktimerError):
    """A known API key whose role may not call this (403)."""


# class → (status, title); the most specific class listed first wins.
_STATUS: list[tuple[type[Exception], int, str]] = [
    (MessageNotFound, 404, "Not Found"),
    (MessageConflict, 409, "Conflict"),
    (PayloadTooLarge, 413, "Payload Too Large"),
    (UnsupportedMediaType, 415, "Unsupported Media Type"),
    (Unauthorized, 401, "Unauthorized"),
    (Forbidden, 403, "Forbidden"),
    (Overloaded, 429, "Too Many Requests"),
    (WriterStopped, 503, "Service Unavailable"),
    (StorageError, 503, "Service Unavailable"),
]


def status_of(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, InvalidInput):
        return exc.status, "Bad Request" if exc.status == 400 else "Unprocessable Content"
    for cls, status, title in _STATUS:
        if isinstance(exc, cls):
            return status, title
    return 500, "Internal Server Error"


def problem(
    status: int,
    title: str,
    detail: str,
    errors: Sequence[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
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
        out.append({"loc": loc, "field": field or "body", "reason": str(err.get("msg", "invalid"))})
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
    return InvalidInput(detail, errors, 400 if broken else 422)


def _summary(errors: list[dict[str, Any]]) -> str:
    return "; ".join(f"{e['field']}: {e['reason']}" for e in errors)


def _flat_routes(routes: Sequence[Any]) -> list[BaseRoute]:
    """The routes of the app and of every included router (FastAPI wraps those)."""
    out: list[BaseRoute] = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            out += _flat_routes(inner.routes)
        elif isinstance(route, BaseRoute):
            out.append(route)
    return out


def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method some route serves at this path (RFC 9110: Allow lists them all);
    starlette names only the first route's, and GET and PUT of a group are two routes."""
    methods: set[str] = set()
    for route in _flat_routes(app.router.routes):
        if route.matches(request.scope)[0] is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


def render(exc: RocktimerError) -> Response:
    """The problem document of one of our errors (the one mapping of errors to HTTP)."""
    status, title = status_of(exc)
    if status >= 500 and status != 503:
        log.error("unexpected error: %r", exc)
    headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, Overloaded) else None
    if isinstance(exc, StorageError | WriterStopped):
        headers = {"Retry-After": "1"}
    errors = exc.errors if isinstance(exc, InvalidInput) else None
    return problem(status, title, str(exc), errors, headers)


def install(app: FastAPI) -> None:
    """Register the handlers that turn every exception into a problem document."""

    @app.exception_handler(RocktimerError)
    async def _domain(_: Request, exc: RocktimerError) -> Response:
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

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> Response:
        log.exception("unhandled error")
        return problem(500, "Internal Server Error", "an unexpected error occurred")
