"""A group's dead letters across partitions: the topic ``%DLQ%group`` read whole.

A dead letter is written on its source topic's partition, into that partition's
``%DLQ%group`` (app/cluster/layout.py), so each partition holds a part of the topic. A
request for it is answered from every partition (this worker's, and for a client's
request each other worker's, which answers for its own):

- receive: the partitions in turn, each asked for what is still wanted, without waiting;
  a long poll sweeps them again every DLQ_POLL_MS until something came or its wait ends
  (dead letters are rare: a poll of an empty lane costs a few reads);
- ack, nack: every partition gets the receipts; a receipt's status is the one of the
  partition that knows it (a receipt is MAC'd with its partition's secret: elsewhere it is
  ``unknown``);
- invisibility, a message's status, its state for a group, GET of a group's settings: the
  partition that has it (the first 200), else the first answer;
- PUT of a group's settings: every partition (the same settings wherever its dead
  letters are);
- everything else on the topic (a send, refused; a stream, which reads the dead letters
  of its own partition only): that partition, as any topic.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

import orjson
from pydantic import ValidationError
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.cluster.gather import Answer, Part, replay, unanswered
from app.cluster.relay import request_body, unavailable
from app.errors import invalid, render
from app.limits import BodyLimit
from app.schemas import ReceiveRequest
from app.wire import json_response

DLQ_POLL_MS = 50


def kind(path: str) -> str:
    """What a request on ``/v1/topics/%DLQ%g/...`` does, by the path after the topic."""
    rest = path.split("/")[4:]  # "", "v1", "topics", topic, ...
    if len(rest) == 3 and rest[0] == "groups" and rest[2] in ("receive", "ack", "nack"):
        return rest[2]
    if (len(rest) == 3 and rest[0] == "groups" and rest[2] == "invisibility") or (
        len(rest) == 4 and rest[0] == "groups" and rest[2] == "messages"
    ):
        return "first"
    if len(rest) == 2 and rest[0] == "messages":
        return "first"
    if len(rest) == 2 and rest[0] == "groups":
        return "settings"
    return "own"


class Gatherer(Protocol):
    """What the dead letters ask of a worker's router (app/cluster/router.py)."""

    def parts(self, scope: Scope) -> list[Part | None]: ...

    async def collect(
        self, part: Part | None, scope: Scope, body: bytes = b""
    ) -> Answer | None: ...

    async def answers(self, scope: Scope, body: bytes = b"") -> list[Answer | None]: ...


class DeadLetters:
    """The gathered ``%DLQ%`` topic of one worker's router."""

    def __init__(self, router: Gatherer, limit: BodyLimit) -> None:
        self.router = router
        self.limit = limit

    async def answer(self, scope: Scope, receive: Receive, send: Send, what: str) -> None:
        body = await request_body(self.limit, scope, receive, send)
        if body is None:
            return  # refused (over the limit), or the client went away
        method = scope["method"]
        if what == "receive" and method == "POST":
            response = await self._receive(scope, body)
        elif what in ("ack", "nack") and method == "POST":
            response = await self._settle(scope, body)
        elif what == "settings" and method == "PUT":
            response = await self._every(scope, body)
        else:
            response = await self._first(scope, body)
        await response(scope, receive, send)

    async def _receive(self, scope: Scope, body: bytes) -> Response:
        try:
            asked = ReceiveRequest.model_validate_json(body or b"{}")
        except ValidationError as exc:
            return render(invalid(exc))
        deadline = time.monotonic() + asked.wait_ms / 1000
        fields = orjson.loads(body or b"{}")
        got: list[Any] = []
        while True:
            for part in self.router.parts(scope):
                wanted = asked.max_messages - len(got)
                if wanted <= 0:
                    break
                one = orjson.dumps({**fields, "max_messages": wanted, "wait_ms": 0})
                answer = await self.router.collect(part, scope, one)
                if (refused := unanswered([answer])) is not None:
                    if got:  # what is held is answered; the rest waits for the next receive
                        break
                    return refused
                assert answer is not None
                got += orjson.loads(answer.body)["messages"]
            left = deadline - time.monotonic()
            if got or left <= 0:
                return json_response({"messages": got})
            await asyncio.sleep(min(DLQ_POLL_MS / 1000, left))

    async def _settle(self, scope: Scope, body: bytes) -> Response:
        answers = await self.router.answers(scope, body)
        if (refused := unanswered(answers)) is not None:
            return refused
        merged: list[dict[str, Any]] = []
        pages = [orjson.loads(a.body)["results"] for a in answers if a is not None]
        for results in zip(*pages, strict=True):
            known = [r for r in results if r["status"] != "unknown"]
            merged.append(known[0] if known else results[0])
        return json_response({"results": merged})

    async def _first(self, scope: Scope, body: bytes) -> Response:
        answers = await self.router.answers(scope, body)
        for answer in answers:
            if answer is not None and answer.status == 200:
                return replay(answer)
        if any(answer is None for answer in answers):  # the one that is down may have it
            return unavailable("a partition")
        first = answers[0]
        assert first is not None
        return replay(first)

    async def _every(self, scope: Scope, body: bytes) -> Response:
        answers = await self.router.answers(scope, body)
        for answer in answers:
            if answer is None:
                return unavailable("a partition")
            if answer.status >= 300:
                return replay(answer)
        first = answers[0]
        assert first is not None
        return replay(first)
