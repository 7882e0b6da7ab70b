"""Requests answered by several partitions: each part's answer collected, then merged by
the caller (app/cluster/router.py, app/cluster/dlq.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple
from urllib.parse import parse_qs

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.cluster.relay import unavailable
from app.defaults import PAGE_DEFAULT
from app.wire import encode_cursor

Part = Callable[[Scope, Receive, Send], Awaitable[None]]
"""Who answers for some partitions: a local partition's app, or another worker's relay."""


class Answer(NamedTuple):
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


async def call(app: Part, scope: Scope, body: bytes = b"") -> Answer:
    """The request (its own headers: its API key; a HEAD as GET) with ``body``, answered by
    ``app`` in process or over a relay, collected."""
    status = 0
    headers: list[tuple[bytes, bytes]] = []
    chunks: list[bytes] = []
    asked = False

    async def receive() -> Message:
        nonlocal asked
        if asked:  # a client that stays until the reply is whole
            await asyncio.get_running_loop().create_future()
        asked = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    method = "GET" if scope["method"] == "HEAD" else scope["method"]
    await app({**scope, "method": method}, receive, send)
    return Answer(status, headers, b"".join(chunks))


def replay(answer: Answer) -> Response:
    response = Response(answer.body, status_code=answer.status)
    response.raw_headers = [h for h in answer.headers if h[0] != b"content-length"]
    response.raw_headers.append((b"content-length", str(len(answer.body)).encode()))
    return response


def unanswered(answers: Sequence[Answer | None]) -> Response | None:
    """A 503 if a worker is down (a merge without its partitions would be a wrong answer),
    the first refusal as it was (401, 422 …), or None when every partition answered."""
    if any(a is None for a in answers):
        return unavailable("a partition")
    for answer in answers:
        assert answer is not None
        if answer.status != 200:
            return replay(answer)
    return None


def merged_page(
    pages: Sequence[dict[str, Any]], name: str, counts: tuple[str, ...], scope: Scope
) -> dict[str, Any]:
    """One page of names (topics, groups) from each partition's page of the first
    ``limit`` after the cursor: by ``name``, one item per name with its ``counts`` summed
    (a name in the merged first ``limit`` is in the page of every partition that has it),
    the cursor the last name, so pages are stable across partitions."""
    merged: dict[str, dict[str, Any]] = {}
    for item in (i for p in pages for i in p["items"]):
        have = merged.get(item[name])
        if have is None:
            merged[item[name]] = dict(item)
        else:
            for count in counts:
                have[count] += item[count]
    query = parse_qs(scope["query_string"].decode("latin-1"))
    limit = int(query.get("limit", [PAGE_DEFAULT])[0])  # each partition checked it
    items = [merged[key] for key in sorted(merged)]
    page: dict[str, Any] = {"items": items[:limit]}
    if len(items) > limit or any("next_cursor" in p for p in pages):
        page["next_cursor"] = encode_cursor(str(items[limit - 1][name]).encode())
    return page
