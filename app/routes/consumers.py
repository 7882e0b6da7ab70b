"""Consumer routes: receive (long poll), ack, nack, invisibility, per-group state and the
group settings read (api.md, Consumer)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.config import Settings
from app.deps import GroupPath, MsgIdPath, TopicPath, engine_of, readable_topic
from app.fastpath import fast_route
from app.openapi import BODY, V1, WRITE, json_body, replies
from app.routes.common import json_response, parse, received_item
from app.schemas import (
    AckRequest,
    AckResult,
    GroupMessageState,
    InvisibilityRequest,
    InvisibilityResult,
    NackRequest,
    NackResult,
    ReceiveRequest,
    ReceiveResult,
)
from workers.retry import GroupSettings
from workers.runner import Engine

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
        why={409: "The group has push delivery set: its messages go to its webhook"},
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
    return json_response(engine.group_settings(topic, group).shown())
