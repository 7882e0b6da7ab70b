"""Hot routes, declared once and served two ways: by FastAPI, and by an ASGI fast path
without the framework's per-request machinery.

Sends, batch sends, receives, acks, nacks and reschedules are most of the service's
traffic, and the profiles (bench figures 1 and 3) put more of their cost in FastAPI's
routing, dependency solving and exception middlewares than in the calls themselves. A
route declared with ``fast_route`` is registered with its FastAPI router (so it is a
documented operation in /openapi.json, and reachable through FastAPI alike) and with the
``FastPaths`` middleware, which answers the same method and path template with the same
function and the same error rendering (``errors.render``): the two cannot drift apart.
Every other request, and any path the middleware does not recognise, goes on to FastAPI.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.access import ROUTE_KEY
from app.deps import PATH_PARAMS, engine_of, settings_of
from app.errors import render
from storage.errors import InvalidInput

Call = Callable[..., Awaitable[Response]]
"""``call(engine, settings, request, **path_params)`` -> the response."""


@dataclass(frozen=True, slots=True)
class FastRoute:
    method: str
    segments: tuple[str, ...]  # the path template split on "/"; "{name}" is a parameter
    call: Call
    template: str  # as FastAPI declares it: the route label of metrics and logs


FAST_ROUTES: list[FastRoute] = []  # filled by fast_route as the route modules load


def fast_route(router: APIRouter, method: str, path: str, **route: Any) -> Callable[[Call], Call]:
    """Declare a hot route once: a FastAPI route of ``router`` (``route`` holds its OpenAPI
    arguments) and a fast-path entry for the same method and path."""
    template = router.prefix + path
    names = re.findall(r"{(\w+)}", template)

    def register(call: Call) -> Call:
        async def endpoint(request: Request, **params: str) -> Response:
            return await call(engine_of(request), settings_of(request), request, **params)

        # FastAPI reads the path parameters (their validation and docs) off the signature.
        request_param = inspect.Parameter(
            "request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request
        )
        path_params = [
            inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=PATH_PARAMS[n].type)
            for n in names
        ]
        endpoint.__signature__ = inspect.Signature([request_param, *path_params])  # type: ignore[attr-defined]
        endpoint.__name__ = call.__name__
        endpoint.__doc__ = call.__doc__
        router.add_api_route(path, endpoint, methods=[method], **route)
        FAST_ROUTES.append(FastRoute(method, tuple(template.split("/")), call, template))
        return call

    return register


def _param(name: str, value: str) -> str:
    pattern = PATH_PARAMS[name].pattern
    if not pattern.fullmatch(value):
        reason = f"String should match pattern '{pattern.pattern}'"
        raise InvalidInput(
            f"{name}: {reason}", [{"loc": ["path", name], "field": name, "reason": reason}]
        )
    return value


def match(method: str, path: str) -> tuple[FastRoute, dict[str, str]] | None:
    """The fast route for a request and its raw path parameters; None: not a hot path."""
    parts = path.split("/")
    for route in FAST_ROUTES:
        if route.method != method or len(route.segments) != len(parts):
            continue
        params: dict[str, str] = {}
        for want, got in zip(route.segments, parts, strict=True):
            if want.startswith("{"):
                if not got:  # an empty name matches no route: FastAPI's 404
                    break
                params[want[1:-1]] = got
            elif want != got:
                break
        else:
            return route, params
    return None


class FastPaths:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = match(scope["method"], scope["path"]) if scope["type"] == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        route, raw = found
        call, scope[ROUTE_KEY] = route.call, route.template  # the access log's label
        state = scope["app"].state
        try:
            params = {name: _param(name, value) for name, value in raw.items()}
            response = await call(state.engine, state.settings, Request(scope, receive), **params)
        except Exception as exc:  # the same rendering as FastAPI's handler: never a bare 500
            response = render(exc)
        await response(scope, receive, send)
