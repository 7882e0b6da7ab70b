"""A worker process's ASGI app: each request to the partition that answers it.

- ``/v1/topics/{topic}/...``: the topic's partition (``crc32(topic) % P``). A partition of
  this process answers it itself (that partition's app, create_app's, whole: its front
  door, its routes, its engine); another's is relayed to its owner (app/cluster/relay.py).
- ``GET /v1/topics``, ``/readyz``, ``/metrics``, ``/v1/stats`` (the console's overview):
  gathered from every partition and merged.
  A request on the private socket is another worker gathering: it gets this process's
  partitions only.
- anything else (``/healthz``, ``/openapi.json``, ``/docs``, the console's files, ``/v1/me``)
  is the same from every partition: one of this process's answers it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple
from urllib.parse import parse_qs

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.cluster.layout import Layout, partition_of
from app.cluster.relay import OwnerDown, Relay, unavailable
from app.front import Service
from app.routes.common import PAGE_DEFAULT, encode_cursor, json_response

TOPICS = "/v1/topics"
TOPIC_PREFIX = TOPICS + "/"
PARTITION_LABEL = "partition"


class Answer(NamedTuple):
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


async def call(app: Callable[[Scope, Receive, Send], Awaitable[None]], scope: Scope) -> Answer:
    """An in-process GET of ``app`` (the request's own headers: its API key), collected."""
    status = 0
    headers: list[tuple[bytes, bytes]] = []
    chunks: list[bytes] = []
    asked = False

    async def receive() -> Message:
        nonlocal asked
        if asked:  # a client that stays until the reply is whole
            await asyncio.get_running_loop().create_future()
        asked = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app({**scope, "method": "GET"}, receive, send)
    return Answer(status, headers, b"".join(chunks))


def _replay(answer: Answer) -> Response:
    response = Response(answer.body, status_code=answer.status)
    response.raw_headers = [h for h in answer.headers if h[0] != b"content-length"]
    response.raw_headers.append((b"content-length", str(len(answer.body)).encode()))
    return response


class Router:
    def __init__(
        self, layout: Layout, worker: int, apps: dict[int, Service], sockets: Sequence[str]
    ) -> None:
        self.layout = layout
        self.worker = worker
        self.apps = apps
        self.first = apps[min(apps)]
        self.sockets = sockets
        limit = self.first.limit
        self.relays = {w: Relay(sockets[w], limit) for w in range(layout.workers) if w != worker}
        self.gathered: dict[str, Callable[[Scope, Receive, Send], Awaitable[None]]] = {
            TOPICS: self._topics,
            "/readyz": self._readyz,
            "/metrics": self._metrics,
            "/v1/stats": self._stats,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            if path.startswith(TOPIC_PREFIX):
                topic = path[len(TOPIC_PREFIX) :].partition("/")[0]
                if topic:
                    k = partition_of(topic, self.layout.partitions)
                    app = self.apps.get(k)
                    if app is not None:
                        await app(scope, receive, send)
                    else:
                        await self._relay(k, scope, receive, send)
                    return
            elif scope["method"] in ("GET", "HEAD") and (gather := self.gathered.get(path)):
                await gather(scope, receive, send)
                return
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        await self.first(scope, receive, send)

    @staticmethod
    def _internal(scope: Scope) -> bool:
        """Came in on the private unix socket (uvicorn gives a unix socket no port)."""
        server = scope.get("server")
        return server is not None and server[1] is None

    async def _relay(self, k: int, scope: Scope, receive: Receive, send: Send) -> None:
        owner = self.layout.owner(k)
        relay = self.relays.get(owner)
        if relay is None or self._internal(scope):  # never relayed twice
            await unavailable(f"partition {k}")(scope, receive, send)
            return
        try:
            await relay.forward(scope, receive, send)
        except OwnerDown:
            await unavailable(f"partition {k}")(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """Every partition's app starts (its engine, its pusher) and stops with the server."""
        await receive()  # lifespan.startup
        async with contextlib.AsyncExitStack() as stack:
            try:
                for app in self.apps.values():
                    await stack.enter_async_context(app.router.lifespan_context(app))
            except Exception as exc:
                await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            for relay in self.relays.values():
                relay.close()
        await send({"type": "lifespan.shutdown.complete"})

    # --- gathered from every partition ------------------------------------------------------

    async def _answers(self, scope: Scope) -> list[Answer | None]:
        """Each local partition's answer and, for a client's request, each other worker's
        (its partitions merged); None for a worker that is down."""
        calls: list[Awaitable[Answer | None]] = [call(app, scope) for app in self.apps.values()]
        if not self._internal(scope):
            calls += [self._fetch(relay, scope) for relay in self.relays.values()]
        return list(await asyncio.gather(*calls))

    @staticmethod
    async def _fetch(relay: Relay, scope: Scope) -> Answer | None:
        try:
            return await call(relay.forward, scope)
        except OwnerDown:
            return None

    async def _topics(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Topics by name from every partition: the first ``limit`` after the cursor of
        each, merged; the cursor is a name, so pages are stable across partitions."""
        answers = await self._answers(scope)
        response = _unanswered(answers)
        if response is None:
            pages = [orjson.loads(a.body) for a in answers if a is not None]
            query = parse_qs(scope["query_string"].decode("latin-1"))
            limit = int(query.get("limit", [PAGE_DEFAULT])[0])  # each partition checked it
            items = sorted((i for p in pages for i in p["items"]), key=lambda i: str(i["topic"]))
            page: dict[str, Any] = {"items": items[:limit]}
            if len(items) > limit or any("next_cursor" in p for p in pages):
                page["next_cursor"] = encode_cursor(str(items[limit - 1]["topic"]).encode())
            response = json_response(page)
        await response(scope, receive, send)

    async def _readyz(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Ready when every partition is; the counts summed, the backlog's age the oldest."""
        answers = await self._answers(scope)
        response = _unanswered(answers)
        if response is None:
            parts = [orjson.loads(a.body) for a in answers if a is not None]
            response = json_response(
                {
                    "status": "lagging"
                    if any(p["status"] == "lagging" for p in parts)
                    else "ready",
                    **{
                        f: sum(p[f] for p in parts)
                        for f in ("pending_timers", "writer_queue", "due_backlog_timers")
                    },
                    "due_backlog_oldest_ms": max(p["due_backlog_oldest_ms"] for p in parts),
                }
            )
        await response(scope, receive, send)

    async def _stats(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The console's overview of every partition: counts and due buckets summed; the
        lateness quantiles the largest partition's (each is a bucket's upper bound, and the
        q-quantile of the whole is at most the largest of the parts')."""
        answers = await self._answers(scope)
        response = _unanswered(answers)
        if response is None:
            parts = [orjson.loads(a.body) for a in answers if a is not None]
            lateness = [p["lateness"] for p in parts]

            def most(field: str) -> float | None:
                found = [x[field] for x in lateness if x[field] is not None]
                return max(found) if found else None

            due = [p["due_ahead"] for p in parts]
            response = json_response(
                {
                    "now_ms": max(p["now_ms"] for p in parts),
                    **{
                        f: sum(p[f] for p in parts)
                        for f in ("pending_timers", "writer_queue", "long_polls")
                    },
                    "delivered_total": sum(p["delivered_total"] for p in parts),
                    "lateness": {
                        "count": sum(x["count"] for x in lateness),
                        "p50_ms": most("p50_ms"),
                        "p99_ms": most("p99_ms"),
                    },
                    "due_ahead": {
                        "bucket_ms": due[0]["bucket_ms"],
                        "counts": [sum(c) for c in zip(*(d["counts"] for d in due), strict=True)],
                        "capped": any(d["capped"] for d in due),
                    },
                }
            )
        await response(scope, receive, send)

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every partition's metrics, each series with its ``partition`` label."""
        families: dict[str, Metric] = {}
        for k, app in self.apps.items():
            for family in app.state.registry.collect():
                _merge(families, family, {PARTITION_LABEL: str(k)})
        if not self._internal(scope):
            fetched = await asyncio.gather(
                *(self._fetch(relay, scope) for relay in self.relays.values())
            )
            if (response := _unanswered(list(fetched))) is not None:
                await response(scope, receive, send)
                return
            for answer in fetched:
                assert answer is not None
                for family in text_string_to_metric_families(answer.body.decode()):
                    _merge(families, family, {})
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(list(families.values())))
        await Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)(
            scope, receive, send
        )


def _unanswered(answers: Sequence[Answer | None]) -> Response | None:
    """A 503 if a worker is down (a merge without its partitions would be a wrong answer),
    the first refusal as it was (401, 422 …), or None when every partition answered."""
    if any(a is None for a in answers):
        return unavailable("a partition")
    for answer in answers:
        assert answer is not None
        if answer.status != 200:
            return _replay(answer)
    return None


def _merge(families: dict[str, Metric], family: Metric, labels: dict[str, str]) -> None:
    merged = families.get(family.name)
    if merged is None:
        merged = families[family.name] = Metric(family.name, family.documentation, family.type)
    merged.samples += [s._replace(labels={**s.labels, **labels}) for s in family.samples]


class _Families:
    """A collector of families already gathered."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families
