"""Hot routes, declared once and served two ways: by FastAPI, and by an ASGI fast path
without the framework's per-request machinery.

Sends, batch sends, receives, acks, nacks and reschedules are most of the service's
traffic, and profiles of them under load put more of their cost in FastAPI's
routing, dependency solving and exception middlewares than in the calls themselves. A
route declared with ``fast_route`` is registered with its FastAPI router (so it is a
documented operation in /openapi.json, and reachable through FastAPI alike) and with the
front door (app/front.py), which answers the same method and path template with the same
function and the same error rendering (``errors.render``): the two cannot drift apart.
Every other request, and any path the front door does not recognise, goes on to FastAPI.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response
from starlette.types import Receive, Scope

from app.access import ROUTE_KEY
from app.deps import PATH_PARAMS, engine_of, path_param, settings_of
from app.errors import render

Call = Callable[..., Awaitable[Response]]
"""``call(engine, settings, request, **path_params)`` -> the response."""


@dataclass(frozen=True, slots=True)
class FastRoute:
    method: str
    segments: tuple[str, ...]  # the path template split on "/"; "{name}" is a parameter
    call: Call
    template: str  # as FastAPI declares it: the route label of metrics and logs


FAST_ROUTES: list[FastRoute] = []  # filled by fast_route as the route modules load
# The same routes by method and number of path segments: a lookup tries only those.
_BY_SHAPE: dict[tuple[str, int], list[FastRoute]] = {}


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
            inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=PATH_PARAMS[n])
            for n in names
        ]
        endpoint.__signature__ = inspect.Signature([request_param, *path_params])  # type: ignore[attr-defined]
        endpoint.__name__ = call.__name__
        endpoint.__doc__ = call.__doc__
        router.add_api_route(path, endpoint, methods=[method], **route)
        fast = FastRoute(method, tuple(template.split("/")), call, template)
        FAST_ROUTES.append(fast)
        _BY_SHAPE.setdefault((method, len(fast.segments)), []).append(fast)
        return call

    return register


def match(method: str, path: str) -> tuple[FastRoute, dict[str, str]] | None:
    """The fast route for a request and its raw path parameters; None: not a hot path."""
    parts = path.split("/")
    for route in _BY_SHAPE.get((method, len(parts)), ()):
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


async def answer(route: FastRoute, raw: dict[str, str], scope: Scope, receive: Receive) -> Response:
    """Run a fast route; any error becomes its problem reply, as FastAPI's handlers do."""
    scope[ROUTE_KEY] = route.template  # the access log's label
    state = scope["app"].state
    try:
        params = {name: path_param(name, value) for name, value in raw.items()}
        return await route.call(state.engine, state.settings, Request(scope, receive), **params)
    except Exception as exc:  # the same rendering as FastAPI's handler: never a bare 500
        return render(exc)
