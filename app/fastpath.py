"""The hot calls without the framework's per-request machinery.

Sends, batch sends, receives, acks and nacks are most of the service's traffic, and the
profiles (bench figures 1 and 3) put more of their cost in FastAPI's routing, dependency
solving and exception middlewares than in the calls themselves. This pure ASGI middleware
answers exactly those POST paths with the same functions the FastAPI routes call and the
same error rendering (``errors.render``), so the two cannot drift apart; every other
request, and any path it does not recognise, goes on to FastAPI. The routes stay the
documented operations in /openapi.json.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.access import ROUTE_KEY
from app.config import Settings
from app.errors import InvalidInput, problem, render
from app.routes import consumers, producers
from app.schemas import NAME_PATTERN
from storage.errors import RocktimerError
from workers.runner import Engine

log = logging.getLogger("rocktimer.app")

_PREFIX = "/v1/topics/"
_NAME = re.compile(NAME_PATTERN)

TopicCall = Callable[[Engine, Settings, str, Request], Awaitable[Response]]
GroupCall = Callable[[Engine, str, str, Request], Awaitable[Response]]

# /v1/topics/{topic}/<these>
_TOPIC_CALLS: dict[tuple[str, ...], TopicCall] = {
    ("messages",): producers.schedule_one,
    ("messages", "batch"): producers.schedule_many,
}
# /v1/topics/{topic}/groups/{group}/<these>
_GROUP_CALLS: dict[str, GroupCall] = {
    "receive": consumers.take,
    "ack": consumers.settle,
    "nack": consumers.fail,
}


def _name(field: str, value: str) -> str:
    if not _NAME.fullmatch(value):
        reason = f"String should match pattern '{NAME_PATTERN}'"
        raise InvalidInput(
            f"{field}: {reason}", [{"loc": ["path", field], "field": field, "reason": reason}]
        )
    return value


Bound = Callable[[Engine, Settings, Request], Awaitable[Response]]


def _route(path: str) -> tuple[Bound, str] | None:
    """The call for a hot path, with its path parameters bound, and its route template (as
    FastAPI declares it); None: not one of them."""
    if not path.startswith(_PREFIX):
        return None
    parts = path[len(_PREFIX) :].split("/")
    topic, rest = parts[0], tuple(parts[1:])
    if not topic or "" in rest:  # an empty name matches no route: FastAPI's 404
        return None
    topic_call = _TOPIC_CALLS.get(rest)
    if topic_call is not None:
        return (
            lambda engine, settings, request: topic_call(
                engine, settings, _name("topic", topic), request
            ),
            "/v1/topics/{topic}/" + "/".join(rest),
        )
    if len(rest) == 3 and rest[0] == "groups" and rest[2] in _GROUP_CALLS:
        group_call, group = _GROUP_CALLS[rest[2]], rest[1]
        return (
            lambda engine, _, request: group_call(
                engine, _name("topic", topic), _name("group", group), request
            ),
            "/v1/topics/{topic}/groups/{group}/" + rest[2],
        )
    return None


class FastPaths:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = (
            _route(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        )
        if found is None:
            await self.app(scope, receive, send)
            return
        call, scope[ROUTE_KEY] = found
        state = scope["app"].state
        try:
            response = await call(state.engine, state.settings, Request(scope, receive))
        except RocktimerError as exc:
            response = render(exc)
        except Exception:  # as FastAPI's last-resort handler: a problem, never a bare 500
            log.exception("unhandled error")
            response = problem(500, "Internal Server Error", "an unexpected error occurred")
        await response(scope, receive, send)
