"""The single send without the framework's per-request machinery.

``POST /v1/topics/{topic}/messages`` is the hottest call of the service, and the profile
(bench figure 1) put most of its cost in FastAPI's routing, dependency solving and
exception middlewares rather than in the send. This pure ASGI middleware answers exactly
that path with the same function the FastAPI route calls (``producers.schedule_one``) and
the same error rendering (``errors.render``), so the two cannot drift apart; every other
request, and any path it does not recognise, goes on to FastAPI. The route stays the
documented operation in /openapi.json.
"""

from __future__ import annotations

import logging
import re

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import InvalidInput, problem, render
from app.routes.producers import schedule_one
from app.schemas import NAME_PATTERN
from storage.errors import RocktimerError

log = logging.getLogger("rocktimer.app")

_PREFIX = "/v1/topics/"
_SUFFIX = "/messages"
_NAME = re.compile(NAME_PATTERN)


class FastSend:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not path.startswith(_PREFIX)
            or not path.endswith(_SUFFIX)
            or "/" in path[len(_PREFIX) : -len(_SUFFIX)]
            or len(path) == len(_PREFIX) + len(_SUFFIX)
        ):
            await self.app(scope, receive, send)
            return
        topic = path[len(_PREFIX) : -len(_SUFFIX)]
        request = Request(scope, receive)
        state = scope["app"].state
        try:
            if not _NAME.fullmatch(topic):
                reason = f"String should match pattern '{NAME_PATTERN}'"
                raise InvalidInput(
                    f"topic: {reason}",
                    [{"loc": ["path", "topic"], "field": "topic", "reason": reason}],
                )
            response = await schedule_one(
                state.engine, state.settings, topic, request, await request.body()
            )
        except RocktimerError as exc:
            response = render(exc)
        except Exception:  # as FastAPI's last-resort handler: a problem, never a bare 500
            log.exception("unhandled error")
            response = problem(500, "Internal Server Error", "an unexpected error occurred")
        await response(scope, receive, send)
