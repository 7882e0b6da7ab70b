"""The front door: the one ASGI layer every HTTP request passes before anything else.

It keeps the access log and request times, applies the API keys (without them, the guard
against web pages, app/origin.py) and the body size limit,
and answers the hot routes (app/fastpath.py) itself; everything else goes on to FastAPI
and its own middleware stack. Hot requests (sends, receives, acks) thus cross no
framework layer at all: each of the ten the stack had (uvicorn's proxy headers,
Starlette's error middlewares, FastAPI's body limit and telemetry, and ours) wrapped
``send`` and cost a few microseconds on every request.
"""

from __future__ import annotations

import time

from fastapi import FastAPI
from starlette.types import Message, Receive, Scope, Send

from app.access import AccessLog
from app.auth import ApiKeys
from app.errors import render
from app.fastpath import answer, match
from app.limits import BodyLimit
from app.origin import BrowserGuard
from storage.errors import RocktimerError


class Service(FastAPI):
    """The FastAPI app behind its front door (create_app sets its gates)."""

    access: AccessLog
    keys: ApiKeys | None
    guard: BrowserGuard | None  # open mode only: with keys a web page has none to send
    limit: BodyLimit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # if it fails before it answers
        try:
            response = None
            try:
                if self.keys:
                    self.keys.check(scope)
                elif self.guard:
                    self.guard.check(scope)
                self.limit.check(scope)
            except RocktimerError as refused:
                response = render(refused)
            if response is None and (found := match(scope["method"], scope["path"])):
                scope["app"] = self
                response = await answer(*found, scope, self.limit.counted(receive))
            if response is not None:
                status = response.status_code
                await response(scope, receive, send)
                return

            async def send_status(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            await super().__call__(scope, self.limit.counted(receive), send_status)
        finally:
            self.access.done(scope, status, started)
