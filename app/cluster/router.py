"""A worker process's (or a cluster node's) ASGI app: each request to the partition that
answers it, wherever its locator (app/cluster/locator.py) says that partition is.

- ``/v1/topics/{topic}/...``: the topic's partition (``crc32(topic) % P``). A partition of
  this process answers it itself (that partition's app, create_app's, whole: its front
  door, its routes, its engine); another's is relayed to its owner (app/cluster/relay.py).
- ``GET /v1/topics``, ``/readyz``, ``/metrics``, ``/v1/stats`` (the console's overview):
  gathered from every partition and merged.
  A request relayed from another process is that process gathering: it gets this
  process's partitions only.
- ``/v1/topics/%DLQ%{group}/...``: a group's dead letters, kept on their source topics'
  partitions, read from all of them (app/cluster/dlq.py).
- anything else (``/healthz``, ``/openapi.json``, ``/docs``, the console's files, ``/v1/me``)
  is the same from every partition: one of this process's answers it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.cluster.dlq import DeadLetters, kind
from app.cluster.gather import Answer, Part, call, merged_page, replay, unanswered
from app.cluster.layout import partition_of
from app.cluster.locator import Locator
from app.cluster.relay import OwnerDown, unavailable
from app.errors import PartitionsNotServed, render
from app.limits import BodyLimit
from app.wire import json_response
from storage.keys import DLQ_PREFIX

TOPICS = "/v1/topics"
TOPIC_PREFIX = TOPICS + "/"
PARTITION_LABEL = "partition"
TOPIC_COUNTS = ("scheduled", "delivered", "cancelled")


class Router:
    def __init__(self, locator: Locator, limit: BodyLimit) -> None:
        self.locator = locator
        self.gathered: dict[str, Callable[[Scope, Receive, Send], Awaitable[None]]] = {
            TOPICS: self._topics,
            "/readyz": self._readyz,
            "/metrics": self._metrics,
            "/v1/stats": self._stats,
        }
        self.dead_letters = DeadLetters(self, limit)
        # This process's CPU, memory and files (prometheus_client's process_* series).
        self.process = ProcessCollector(registry=None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            if path.startswith(TOPIC_PREFIX):
                topic = path[len(TOPIC_PREFIX) :].partition("/")[0]
                if topic.startswith(DLQ_PREFIX) and (what := kind(path, scope["method"])) != "own":
                    await self.dead_letters.answer(scope, receive, send, what)
                    return
                if topic:
                    await self._to_owner(topic, scope, receive, send)
                    return
            elif scope["method"] in ("GET", "HEAD") and (gather := self.gathered.get(path)):
                await gather(scope, receive, send)
                return
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if (part := self.locator.fallback(scope)) is None:
            await unavailable("the service")(scope, receive, send)
            return
        try:
            await part(scope, receive, send)
        except OwnerDown:
            await unavailable("the service")(scope, receive, send)

    async def _to_owner(self, topic: str, scope: Scope, receive: Receive, send: Send) -> None:
        k = partition_of(topic, self.locator.partitions)
        local = self.locator.local(scope)
        app = None if local is None else local.get(k)
        if app is not None:
            await app(scope, receive, send)
            return
        part = self.locator.owner(k, scope)
        if part is None:
            await unavailable(f"partition {k}")(scope, receive, send)
            return
        try:
            await part(scope, receive, send)
        except OwnerDown:
            await unavailable(f"partition {k}")(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """Every partition's app starts (its engine, its pusher) and stops with the server."""
        await receive()  # lifespan.startup
        async with contextlib.AsyncExitStack() as stack:
            try:
                await stack.enter_async_context(self.locator.lifespan())
            except Exception as exc:
                await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})

    # --- gathered from every partition ------------------------------------------------------

    def parts(self, scope: Scope) -> list[Part | None]:
        """Who answers for which partitions, in a fixed order: each local partition's app,
        then, for a client's request, each other process (for its own partitions); a None
        for partitions that no one answers now (a merge without them would be wrong)."""
        local = self.locator.local(scope)
        if local is None:
            return [None]
        return [*local.values(), *(peer.part for peer in self.locator.peers(scope))]

    @staticmethod
    async def collect(part: Part | None, scope: Scope, body: bytes = b"") -> Answer | None:
        """One part's answer to the request with ``body``; None if its owner is down."""
        if part is None:
            return None
        try:
            return await call(part, scope, body)
        except OwnerDown:
            return None

    async def answers(self, scope: Scope, body: bytes = b"") -> list[Answer | None]:
        """Every part's answer, in the order of ``parts``."""
        parts = self.parts(scope)
        return list(await asyncio.gather(*(self.collect(p, scope, body) for p in parts)))

    async def _topics(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Topics by name from every partition: the first ``limit`` after the cursor of
        each, merged; the cursor is a name, so pages are stable across partitions. A
        group's ``%DLQ%`` topic has a part in every partition that holds its dead letters:
        one item, the counts summed (a name in the merged first ``limit`` is in the page
        of every partition that has it)."""
        answers = await self.answers(scope)
        response = unanswered(answers)
        if response is None:
            pages = [orjson.loads(a.body) for a in answers if a is not None]
            page = merged_page(pages, "topic", TOPIC_COUNTS, scope)
            response = json_response(page)
        await response(scope, receive, send)

    async def _readyz(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Ready when every process is (each worker, or in cluster mode each node), each
        with every partition it owns; the counts summed, the backlog's age the oldest.
        ``workers`` (``nodes``) says which process owns which partitions and how it is
        (``ready``, ``lagging``, ``not ready``: a partition's store or thread is not
        running, ``down``: its process is being started again, or in cluster mode no node
        serves those partitions right now); one that is not ready makes a 503 (+
        Retry-After) naming it, while the others go on serving their partitions."""
        label = self.locator.label
        local = self.locator.local(scope)
        if local is None:
            await unavailable("a partition")(scope, receive, send)
            return
        answered = await asyncio.gather(*(self.collect(app, scope) for app in local.values()))
        mine: dict[str, Any] = {label: self.locator.name, "partitions": sorted(local)}
        parts = [orjson.loads(a.body) for a in answered if a is not None and a.status == 200]
        if len(parts) < len(answered):
            processes = [{**mine, "status": "not ready"}]
        else:
            lagging = any(p["status"] == "lagging" for p in parts)
            processes = [{**mine, "status": "lagging" if lagging else "ready"}]
        if not local:  # a node that serves no partition now says nothing of itself
            processes = []
        peers = self.locator.peers(scope)
        remote = await asyncio.gather(*(self.collect(p.part, scope) for p in peers))
        for peer, answer in zip(peers, remote, strict=True):
            owned: dict[str, Any] = {label: peer.name, "partitions": peer.partitions}
            if answer is None:
                processes.append({**owned, "status": "down"})
                continue
            body = orjson.loads(answer.body)
            processes += body.get(f"{label}s") or [{**owned, "status": "not ready"}]
            if answer.status == 200:
                parts.append(body)
        processes.sort(key=lambda w: (len(str(w[label])), str(w[label])))
        if any(w["status"] in ("down", "not ready") for w in processes) or not parts:
            response = _not_ready(label, processes)
        else:
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
                    f"{label}s": processes,
                }
            )
        await response(scope, receive, send)

    async def _stats(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The console's overview of every partition: counts and due buckets summed; the
        lateness quantiles the largest partition's (each is a bucket's upper bound, and the
        q-quantile of the whole is at most the largest of the parts')."""
        answers = await self.answers(scope)
        response = unanswered(answers)
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
        """Every partition's metrics, each series with its ``partition`` label, and each
        process's own (its CPU and memory, ``rocktimer_worker_up`` or, in cluster mode,
        ``rocktimer_node_up``) with its ``worker`` (``node``) label. A process that is down
        is ``rocktimer_worker_up{worker} 0``, its partitions' series absent: the others'
        are still scraped. A request relayed from another process gets this one's only."""
        label = self.locator.label
        up_name = f"rocktimer_{label}_up"
        families: dict[str, Metric] = {}
        local = self.locator.local(scope)
        if local is None:
            await unavailable("a partition")(scope, receive, send)
            return
        peers = self.locator.peers(scope)
        fetched = await asyncio.gather(*(self.collect(p.part, scope) for p in peers))
        for k, app in local.items():
            for family in app.state.registry.collect():
                _merge(families, family, {PARTITION_LABEL: str(k)})
        for family in self.process.collect():
            _merge(families, family, {label: str(self.locator.name)})
        up = GaugeMetricFamily(up_name, f"1: the {label} process serves its partitions; 0: down")
        up.add_sample(up_name, {label: str(self.locator.name)}, 1.0)
        _merge(families, up, {})
        for peer, answer in zip(peers, fetched, strict=True):
            if answer is None:
                if peer.name is not None:
                    down = GaugeMetricFamily(up_name, "")
                    down.add_sample(up_name, {label: str(peer.name)}, 0.0)
                    _merge(families, down, {})
                continue
            if answer.status != 200:
                await replay(answer)(scope, receive, send)
                return
            for family in text_string_to_metric_families(answer.body.decode()):
                _merge(families, family, {})
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(list(families.values())))
        await Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)(
            scope, receive, send
        )


def _not_ready(label: str, processes: list[dict[str, Any]]) -> Response:
    """503 + Retry-After naming the workers (nodes) that do not serve their partitions."""

    def one(w: dict[str, Any]) -> str:
        partitions = ", ".join(map(str, w["partitions"]))
        if w[label] is None:  # cluster mode: no node serves them right now
            return f"partitions {partitions} have no owner right now (being moved)"
        state = "being started again" if w["status"] == "down" else "not ready"
        return f"{label} {w[label]} (partitions {partitions}) is {state}"

    named = "; ".join(one(w) for w in processes if w["status"] in ("down", "not ready"))
    return render(
        PartitionsNotServed(
            f"{named or 'no partition is served yet'}; the other {label}s serve their partitions",
            {f"{label}s": processes},
        )
    )


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
