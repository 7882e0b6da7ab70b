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
  partition that has it (the first 200), else the first answer other than a 404 (a
  receipt that no longer holds its message: 409), else the 404;
- PUT of a group's settings: every partition (the same settings wherever its dead
  letters are);
- a stream: one stream from every partition, their events passed on as each comes (a
  whole event at a time), ``max_in_flight`` shared among them (each gets its part, at
  least one); it ends when any of them ends (the server stops) or the client goes, which
  ends the others; a partition down when it opens is a 503, as a receive's;
- the topic's groups (``GET .../groups``): every partition's, merged by name (each
  partition counts the dead letters it holds);
- everything else on the topic (a send, refused; its scheduled messages, none): the
  topic's own partition, as any topic.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol
from urllib.parse import parse_qs, urlencode

import orjson
from pydantic import ValidationError
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.cluster.gather import Answer, Part, merged_page, replay, unanswered
from app.cluster.relay import OwnerDown, request_body, unavailable
from app.defaults import STREAM_MAX_IN_FLIGHT, STREAM_MAX_IN_FLIGHT_LIMIT
from app.errors import invalid, render
from app.limits import BodyLimit
from app.schemas import ReceiveRequest
from app.wire import json_response

DLQ_POLL_MS = 50
GROUP_COUNTS = ("backlog", "inflight", "retrying", "dead")

log = logging.getLogger("rocktimer")


def kind(path: str, method: str) -> str:
    """What a request on ``/v1/topics/%DLQ%g/...`` does, by the path after the topic."""
    rest = path.split("/")[4:]  # "", "v1", "topics", topic, ...
    if len(rest) == 3 and rest[0] == "groups" and rest[2] in ("receive", "ack", "nack"):
        return rest[2]
    if len(rest) == 3 and rest[0] == "groups" and rest[2] == "stream":
        return "stream" if method == "GET" else "own"  # a HEAD: the headers, from one
    if rest == ["groups"] and method in ("GET", "HEAD"):
        return "groups"
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
        if what == "stream":
            parts = self.router.parts(scope)
            if any(part is None for part in parts):  # partitions no one serves right now
                await unavailable("a partition")(scope, receive, send)
                return
            await Streams([part for part in parts if part is not None], scope).run(receive, send)
            return
        if what == "groups":
            response = await self._groups(scope)
        elif what == "receive" and method == "POST":
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

    async def _groups(self, scope: Scope) -> Response:
        """The groups reading the dead letters, from every partition, merged by name."""
        answers = await self.router.answers(scope)
        if (refused := unanswered(answers)) is not None:
            return refused
        pages = [orjson.loads(a.body) for a in answers if a is not None]
        page = merged_page(pages, "group", GROUP_COUNTS, scope)
        return json_response(page)

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
        # No partition has it: the one that knows why (a receipt that no longer holds its
        # message: 409) over the others' not knowing it (404).
        known = [a for a in answers if a is not None and a.status != 404]
        first = known[0] if known else answers[0]
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


class Streams:
    """One client's stream of a ``%DLQ%`` topic: a stream from each part, multiplexed."""

    def __init__(self, parts: list[Part], scope: Scope) -> None:
        self.parts = parts
        self.scope = scope
        self.queue: asyncio.Queue[tuple[int, Message | None]] = asyncio.Queue()
        self.held = [b""] * len(parts)  # each part's bytes after its last whole event
        self.early: list[bytes] = []  # events of parts that began before the others

    def share(self, i: int) -> Scope:
        """Part ``i``'s request: its share of ``max_in_flight`` (a value the route would
        refuse is passed on as it is, for each part to refuse)."""
        query = parse_qs(self.scope["query_string"].decode("latin-1"))
        asked = query.get("max_in_flight", [str(STREAM_MAX_IN_FLIGHT)])[-1]
        if not asked.isdigit() or not 1 <= int(asked) <= STREAM_MAX_IN_FLIGHT_LIMIT:
            return self.scope
        n = len(self.parts)
        query["max_in_flight"] = [str(max(1, int(asked) // n + (i < int(asked) % n)))]
        return {**self.scope, "query_string": urlencode(query, doseq=True).encode()}

    async def part(self, i: int) -> None:
        """Run part ``i``; each message it sends is queued, then None when it is done."""
        asked = False

        async def receive() -> Message:
            nonlocal asked
            if asked:  # the client's going is this task's cancellation
                await asyncio.get_running_loop().create_future()
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            await self.queue.put((i, message))

        try:
            await self.parts[i](self.share(i), receive, send)
        except (OwnerDown, ConnectionError):
            pass  # its worker is down, or went in the middle: the stream ends
        except Exception:
            log.exception("a partition's part of a dead-letter stream failed")
        finally:
            self.queue.put_nowait((i, None))

    def whole(self, i: int, chunk: bytes) -> bytes:
        """What of part ``i``'s bytes ends an event: no event is cut by another's."""
        held = self.held[i] + chunk
        end = held.rfind(b"\n\n") + 2  # 1: none ends here
        if end == 1:
            self.held[i] = held
            return b""
        self.held[i] = held[end:]
        return held[:end]

    async def run(self, receive: Receive, send: Send) -> None:
        tasks = [asyncio.ensure_future(self.part(i)) for i in range(len(self.parts))]
        gone = asyncio.ensure_future(receive())  # the request was read: this is the going
        starts: dict[int, Message] = {}
        refused: tuple[int, Message, list[bytes]] | None = None
        try:
            while True:
                got = asyncio.ensure_future(self.queue.get())
                await asyncio.wait((got, gone), return_when=asyncio.FIRST_COMPLETED)
                if not got.done():
                    got.cancel()
                    return  # the client went away
                i, message = got.result()
                if message is None:  # a part ended (or could not begin)
                    if len(starts) < len(self.parts):
                        await unavailable("a partition")(self.scope, receive, send)
                    else:
                        await send({"type": "http.response.body", "body": b""})
                    return
                if message["type"] == "http.response.start":
                    if message["status"] != 200:
                        refused = refused or (i, message, [])
                        continue
                    starts[i] = message
                    if len(starts) == len(self.parts) and refused is None:
                        await send(message)  # every part streams: the client's stream begins
                        early, self.early = b"".join(self.early), []
                        if early:
                            await send(
                                {"type": "http.response.body", "body": early, "more_body": True}
                            )
                    continue
                body = message.get("body", b"")
                if refused is not None:  # a part's refusal (401, 409, 422): passed on whole
                    if i == refused[0]:
                        refused[2].append(body)
                        if not message.get("more_body", False):
                            await send(refused[1])
                            await send({"type": "http.response.body", "body": b"".join(refused[2])})
                            return
                    continue
                if not (events := self.whole(i, body)):
                    continue
                if len(starts) < len(self.parts):  # held until every part streams
                    self.early.append(events)
                else:
                    await send({"type": "http.response.body", "body": events, "more_body": True})
        finally:
            gone.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
