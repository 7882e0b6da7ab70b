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

import re
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.config import Settings
from app.errors import render
from app.routes import consumers, producers
from app.schemas import NAME_PATTERN
from storage.errors import InvalidInput
from workers.runner import Engine

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


def _route(path: str) -> Callable[[Engine, Settings, Request], Awaitable[Response]] | None:
    """The call for a hot path, with its path parameters bound; None: not one of them."""
    if not path.startswith(_PREFIX):
        return None
    parts = path[len(_PREFIX) :].split("/")
    topic, rest = parts[0], tuple(parts[1:])
    if not topic or "" in rest:  # an empty name matches no route: FastAPI's 404
        return None
    topic_call = _TOPIC_CALLS.get(rest)
    if topic_call is not None:
        return lambda engine, settings, request: topic_call(
            engine, settings, _name("topic", topic), request
        )
    if len(rest) == 3 and rest[0] == "groups" and rest[2] in _GROUP_CALLS:
        group_call, group = _GROUP_CALLS[rest[2]], rest[1]
        return lambda engine, _, request: group_call(
            engine, _name("topic", topic), _name("group", group), request
        )
    return None


class FastPaths:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        call = (
            _route(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        )
        if call is None:
            await self.app(scope, receive, send)
            return
        state = scope["app"].state
        try:
            response = await call(state.engine, state.settings, Request(scope, receive))
        except Exception as exc:  # the same rendering as FastAPI's handler: never a bare 500
            response = render(exc)
        await response(scope, receive, send)
