"""Consumer routes: receive (long poll) and ack (api.md, Consumer)."""

from __future__ import annotations

import base64
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from app.config import Role
from app.deps import EngineDep, GroupPath, TopicPath, require
from app.routes.common import ERRORS, json_body, json_response, parse
from app.schemas import AckRequest, AckResult, ReceiveRequest, ReceiveResult
from storage.records import BodyEncoding
from workers.consume import Received

router = APIRouter(
    prefix="/v1/topics/{topic}/groups/{group}",
    tags=["consumer"],
    dependencies=[Depends(require(Role.CONSUMER))],
)


def _received(topic: str, got: Received) -> dict[str, Any]:
    rec = got.record
    if rec.body_encoding is BodyEncoding.BASE64:
        body, encoding = base64.b64encode(rec.body).decode(), "base64"
    else:
        body, encoding = rec.body.decode(), "utf8"
    out: dict[str, Any] = {
        "topic": topic,
        "msg_id": rec.msg_id,
        "body": body,
        "body_encoding": encoding,
        "properties": rec.properties,
        "deliver_at_ms": rec.deliver_at_ms,
        "delivered_at_ms": rec.delivered_at_ms,
        "attempt": got.attempt,
        "receipt": got.receipt,
    }
    if rec.tag is not None:
        out["tag"] = rec.tag
    return out


@router.post(
    "/receive",
    operation_id="receive_messages",
    summary="Receive visible messages (long poll with wait_ms)",
    openapi_extra=json_body(ReceiveRequest),
    responses={200: {"model": ReceiveResult}, **ERRORS},
)
async def receive_messages(
    topic: TopicPath, group: GroupPath, request: Request, engine: EngineDep
) -> Response:
    req = await parse(request, ReceiveRequest)
    got = await engine.receive(topic, group, req.max_messages, req.wait_ms, req.invisible_ms)
    return json_response({"messages": [_received(topic, g) for g in got]})


@router.post(
    "/ack",
    operation_id="ack_messages",
    summary="Acknowledge received messages by receipt",
    openapi_extra=json_body(AckRequest),
    responses={200: {"model": AckResult}, **ERRORS},
)
async def ack_messages(
    topic: TopicPath, group: GroupPath, request: Request, engine: EngineDep
) -> Response:
    req = await parse(request, AckRequest)
    statuses = await engine.ack(topic, group, list(req.receipts))
    results = [{"receipt": r, "status": s} for r, s in zip(req.receipts, statuses, strict=True)]
    return json_response({"results": results})
