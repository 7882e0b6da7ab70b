"""Consumer routes: receive (long poll), the stream of messages (server-sent events), ack,
nack, invisibility, per-group state and the group settings read (api.md, Consumer)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse

from app.config import Settings
from app.defaults import (
    INVISIBLE_MS,
    INVISIBLE_MS_MAX,
    INVISIBLE_MS_MIN,
    STREAM_KEEPALIVE_MS,
    STREAM_MAX_IN_FLIGHT,
    STREAM_MAX_IN_FLIGHT_LIMIT,
)
from app.deps import GroupPath, MsgIdPath, TopicPath, engine_of, readable_topic, settings_of
from app.fastpath import fast_route
from app.limits import HEAD_KEY
from app.openapi import BODY, REF, V1, WRITE, json_body, replies
from app.routes.common import parse
from app.schemas import (
    AckRequest,
    AckResult,
    GroupMessageState,
    InvisibilityRequest,
    InvisibilityResult,
    NackRequest,
    NackResult,
    ReceivedMessage,
    ReceiveRequest,
    ReceiveResult,
)
from app.wire import json_response, received_item
from workers.engine import Engine
from workers.ops.consume import Received
from workers.rules.retry import GroupSettings

PUSHED = "The group has push delivery set: its messages go to its webhook"

router = APIRouter(
    prefix="/v1/topics/{topic}/groups/{group}",
    tags=["consumer"],
)


def _per_receipt(receipts: list[str], statuses: list[str]) -> Response:
    results = [{"receipt": r, "status": s} for r, s in zip(receipts, statuses, strict=True)]
    return json_response({"results": results})


@fast_route(
    router,
    "POST",
    "/receive",
    operation_id="receive_messages",
    summary="Receive visible messages (long poll with wait_ms)",
    openapi_extra=json_body(ReceiveRequest),
    responses=replies(
        {200: ReceiveResult},
        *V1,
        *BODY,
        *WRITE,
        409,
        why={409: PUSHED},
    ),
)
async def receive_messages(
    engine: Engine, settings: Settings, request: Request, topic: str, group: str
) -> Response:
    readable_topic(topic)
    engine.refuse_if_pushed(topic, group)
    req = await parse(request, ReceiveRequest)
    got = await engine.receive(topic, group, req.max_messages, req.wait_ms, req.invisible_ms)
    return json_response({"messages": [received_item(topic, g) for g in got]})


KEEP_ALIVE = b": keep-alive\n\n"
_EVENTS_DOC = (
    "Server-sent events: each message as `event: message` and `data:` one receive item "
    "(the JSON of a `ReceivedMessage`, receipt included); a `: keep-alive` comment when "
    f"nothing was sent for the keep-alive interval ({STREAM_KEEPALIVE_MS // 1000} s)."
)


# What each event is (OpenAPI 3.1: a text/event-stream schema describes one event).
_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"const": "message"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": REF.format(model=ReceivedMessage.__name__)},
        },
    },
}


def _events(topic: str, got: list[Received]) -> bytes:
    """One SSE event per message; none: the keep-alive comment."""
    if not got:
        return KEEP_ALIVE
    return b"".join(
        b"event: message\ndata: " + orjson.dumps(received_item(topic, g)) + b"\n\n" for g in got
    )


@router.get(
    "/stream",
    operation_id="stream_messages",
    summary="Receive messages as they become visible (server-sent events)",
    response_class=StreamingResponse,
    responses={
        200: {"description": _EVENTS_DOC, "content": {"text/event-stream": {"schema": _EVENT}}},
        **replies({}, *V1, 409, why={409: PUSHED}),
    },
)
async def stream_messages(
    topic: TopicPath,
    group: GroupPath,
    request: Request,
    invisible_ms: Annotated[
        int,
        Query(ge=INVISIBLE_MS_MIN, le=INVISIBLE_MS_MAX, description="How long each is held"),
    ] = INVISIBLE_MS,
    max_in_flight: Annotated[
        int, Query(ge=1, le=STREAM_MAX_IN_FLIGHT_LIMIT, description="Most unacked messages at once")
    ] = STREAM_MAX_IN_FLIGHT,
) -> Response:
    """Each message the moment it is visible, while fewer than ``max_in_flight`` are
    unsettled (acked, nacked or expired); the stream ends when the client goes or the
    server stops, and its unacked messages come back after ``invisible_ms``."""
    engine = engine_of(request)
    readable_topic(topic)
    engine.refuse_if_pushed(topic, group)
    idle_ms = settings_of(request).stream_keepalive_ms

    async def events() -> AsyncIterator[bytes]:
        async for got in engine.stream(topic, group, invisible_ms, max_in_flight, idle_ms):
            yield _events(topic, got)

    # no-cache and no proxy buffering: each event must reach the client as it is sent
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    if request.scope.get(HEAD_KEY):  # the headers alone: no message is held for nobody
        return Response(media_type="text/event-stream", headers=headers)
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


@fast_route(
    router,
    "POST",
    "/ack",
    operation_id="ack_messages",
    summary="Acknowledge received messages by receipt",
    openapi_extra=json_body(AckRequest),
    responses=replies({200: AckResult}, *V1, *BODY, *WRITE),
)
async def ack_messages(
    engine: Engine, settings: Settings, request: Request, topic: str, group: str
) -> Response:
    readable_topic(topic)
    req = await parse(request, AckRequest)
    return _per_receipt(req.receipts, await engine.ack(topic, group, list(req.receipts)))


@fast_route(
    router,
    "POST",
    "/nack",
    operation_id="nack_messages",
    summary="Fail received messages: they come back after the retry delay, or go to the DLQ",
    openapi_extra=json_body(NackRequest),
    responses=replies({200: NackResult}, *V1, *BODY, *WRITE),
)
async def nack_messages(
    engine: Engine, settings: Settings, request: Request, topic: str, group: str
) -> Response:
    readable_topic(topic)
    req = await parse(request, NackRequest)
    statuses = await engine.nack(topic, group, list(req.receipts), req.delay_ms)
    return _per_receipt(req.receipts, statuses)


@router.post(
    "/invisibility",
    operation_id="change_invisibility",
    summary="Hold a received message longer (or shorter); returns a new receipt",
    openapi_extra=json_body(InvisibilityRequest),
    responses=replies(
        {200: InvisibilityResult},
        *V1,
        *BODY,
        *WRITE,
        404,
        409,
        why={
            404: "No message is held by this receipt in this topic and group",
            409: "The receipt was acked, expired, or the message was received again",
        },
    ),
)
async def change_invisibility(topic: TopicPath, group: GroupPath, request: Request) -> Response:
    engine = engine_of(request)
    readable_topic(topic)
    req = await parse(request, InvisibilityRequest)
    receipt = await engine.change_invisibility(topic, group, req.receipt, req.invisible_ms)
    return json_response({"receipt": receipt})


@router.get(
    "/messages/{msg_id}",
    operation_id="get_group_message",
    summary="A message as this group sees it",
    responses=replies(
        {200: GroupMessageState}, *V1, 404, why={404: "The group never saw this message"}
    ),
)
async def get_group_message(
    topic: TopicPath, group: GroupPath, msg_id: MsgIdPath, request: Request
) -> Response:
    engine = engine_of(request)
    view = engine.group_view(topic, group, msg_id)
    out: dict[str, Any] = {"state": view.state, "attempts": view.attempts}
    if view.next_visible_ms is not None:
        out["next_visible_ms"] = view.next_visible_ms
    if view.last_failure_ms is not None:
        out["last_failure_ms"] = view.last_failure_ms
    return json_response(out)


@router.get(
    "",
    operation_id="get_group_settings",
    summary="The group's settings on this topic (defaults until set)",
    responses=replies({200: GroupSettings}, *V1),
)
async def get_group_settings(topic: TopicPath, group: GroupPath, request: Request) -> Response:
    engine = engine_of(request)
    readable_topic(topic)
    return json_response(engine.group_settings(topic, group).shown())
