"""Producer routes: send, batch send, status, cancel (api.md, Producer)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from app.config import Settings
from app.defaults import MAX_BATCH
from app.deps import MsgIdPath, TopicPath, engine_of, writable_topic
from app.errors import InvalidInput, PayloadTooLarge, invalid, public_detail, status_of
from app.fastpath import fast_route
from app.ids import new_msg_id, new_msg_ids
from app.intake import deliver_time, to_record
from app.openapi import BODY, V1, WRITE, json_body, replies
from app.routes.common import parse, read_body, require_json
from app.schemas import (
    BatchEnvelope,
    BatchResult,
    CancelResult,
    MessageView,
    PlainSendBatch,
    RescheduleMessage,
    SendBatch,
    SendMessage,
    SendResult,
)
from app.wire import json_response
from storage.records import IndexEntry, MessageRecord, MessageState
from workers.engine import Engine
from workers.ops.messages import SendOutcome

router = APIRouter(
    prefix="/v1/topics/{topic}/messages",
    tags=["producer"],
)


_STATE_NAMES = {state: state.name.lower() for state in MessageState}


def _state(state: MessageState) -> str:
    return _STATE_NAMES[state]


def _sent(out: SendOutcome) -> dict[str, Any]:
    return {
        "topic": out.topic,
        "msg_id": out.msg_id,
        "state": _state(out.state),
        "deliver_at_ms": out.deliver_at_ms,
        "created_at_ms": out.created_at_ms,
    }


@fast_route(
    router,
    "POST",
    "",
    operation_id="send_message",
    summary="Schedule one message",
    status_code=201,
    openapi_extra=json_body(SendMessage),
    responses=replies(
        {201: SendResult, 200: SendResult},
        *V1,
        *BODY,
        *WRITE,
        409,
        why={409: "The msg_id was cancelled"},
    ),
)
async def send_message(
    engine: Engine, settings: Settings, request: Request, topic: str
) -> Response:
    engine.lag.admit()  # before any parsing: refusing must cost less than accepting
    writable_topic(topic)
    require_json(request)
    try:
        msg = SendMessage.model_validate_json(await read_body(request))
    except ValidationError as exc:
        raise invalid(exc) from None
    now = engine.clock.now_ms()
    msg_id = msg.msg_id or new_msg_id(now)
    rec = to_record(topic, msg, now, settings, ["body"], msg_id)
    out = await engine.send(rec, fresh_id=msg.msg_id is None)
    return json_response(_sent(out), 201 if out.created else 200)


@fast_route(
    router,
    "POST",
    "/batch",
    operation_id="send_messages",
    summary=f"Schedule up to {MAX_BATCH} messages, each on its own",
    openapi_extra=json_body(SendBatch),
    responses=replies({200: BatchResult}, *V1, *BODY, *WRITE),
)
async def send_messages(
    engine: Engine, settings: Settings, request: Request, topic: str
) -> Response:
    engine.lag.admit()
    writable_topic(topic)
    require_json(request)
    raw = await read_body(request)
    now = engine.clock.now_ms()
    results: list[dict[str, Any] | None]
    records: list[MessageRecord | None] = []
    items: list[SendMessage | None]
    try:
        # The common case: every item is well-formed; one validation pass in Rust.
        items = list(PlainSendBatch.model_validate_json(raw).messages)
        results = [None] * len(items)
    except ValidationError:
        try:  # a tag PlainSendMessage leaves to SendMessage's own check (non-ASCII, say)
            items = list(SendBatch.model_validate_json(raw).messages)
            results = [None] * len(items)
        except ValidationError:
            items, results = _validate_items(await parse(request, BatchEnvelope))
    fresh = [msg is not None and msg.msg_id is None for msg in items]
    made_ids = iter(new_msg_ids(now, sum(fresh)))
    for index, msg in enumerate(items):
        if msg is None:
            records.append(None)
            continue
        msg_id = msg.msg_id or next(made_ids)
        try:
            records.append(
                to_record(topic, msg, now, settings, ["body", "messages", index], msg_id)
            )
        except (InvalidInput, PayloadTooLarge) as exc:
            records.append(None)
            results[index] = {"index": index, "status": status_of(exc)[0], "error": str(exc)}
    outcomes = await engine.send_batch(records, fresh) if any(records) else []
    for index, outcome in enumerate(outcomes):
        if outcome is None:
            continue
        if isinstance(outcome, Exception):
            results[index] = {
                "index": index,
                "status": status_of(outcome)[0],
                "error": public_detail(outcome),
            }
        else:
            results[index] = {
                "index": index,
                "status": 201 if outcome.created else 200,
                "msg_id": outcome.msg_id,
                "state": _STATE_NAMES[outcome.state],
                "deliver_at_ms": outcome.deliver_at_ms,
            }
    return json_response({"results": results})


def _validate_items(
    envelope: BatchEnvelope,
) -> tuple[list[SendMessage | None], list[dict[str, Any] | None]]:
    """Validate item by item, so that one bad item fails alone."""
    items: list[SendMessage | None] = []
    results: list[dict[str, Any] | None] = []
    for index, item in enumerate(envelope.messages):
        try:
            items.append(SendMessage.model_validate(item, strict=True))
            results.append(None)
        except ValidationError as exc:
            err = invalid(exc, ["body", "messages", index])
            items.append(None)
            results.append({"index": index, "status": status_of(err)[0], "error": str(err)})
    return items, results


@router.get(
    "/{msg_id}",
    operation_id="get_message",
    summary="A message's state",
    responses=replies({200: MessageView}, *V1, 404),
)
async def get_message(topic: TopicPath, msg_id: MsgIdPath, request: Request) -> Response:
    engine = engine_of(request)
    found = engine.status(topic, msg_id)
    return json_response(message_view(topic, msg_id, found.entry, found.record))


def message_view(
    topic: str, msg_id: str, entry: IndexEntry, rec: MessageRecord | None
) -> dict[str, Any]:
    """A message as GET .../messages/{msg_id} shows it (MessageView)."""
    view: dict[str, Any] = {
        "topic": topic,
        "msg_id": msg_id,
        "state": _state(entry.state),
        "deliver_at_ms": entry.due_ms,
        "created_at_ms": entry.created_at_ms,
        "properties": rec.properties if rec else {},
    }
    if entry.state is MessageState.DELIVERED:
        view["delivered_at_ms"] = entry.done_at_ms
    if entry.state is MessageState.CANCELLED:
        view["cancelled_at_ms"] = entry.done_at_ms
    if rec is not None and rec.tag is not None:
        view["tag"] = rec.tag
    return view


@fast_route(
    router,
    "PATCH",
    "/{msg_id}",
    operation_id="reschedule_message",
    summary="Move a scheduled message to another time (a past time: at once)",
    openapi_extra=json_body(RescheduleMessage),
    responses=replies(
        {200: SendResult},
        *V1,
        *BODY,
        *WRITE,
        404,
        409,
        why={409: "Already delivered, or cancelled"},
    ),
)
async def reschedule_message(
    engine: Engine, settings: Settings, request: Request, topic: str, msg_id: str
) -> Response:
    writable_topic(topic)
    body = await parse(request, RescheduleMessage)
    deliver_at = deliver_time(body, engine.clock.now_ms(), settings, ["body"], required=True)
    return json_response(_sent(await engine.reschedule(topic, msg_id, deliver_at)))


@router.delete(
    "/{msg_id}",
    operation_id="cancel_message",
    summary="Cancel a scheduled message (a uniq-key tombstone)",
    responses=replies({200: CancelResult}, *V1, *WRITE, 404, 409, why={409: "Already delivered"}),
)
async def cancel_message(topic: TopicPath, msg_id: MsgIdPath, request: Request) -> Response:
    engine = engine_of(request)
    out = await engine.cancel(topic, msg_id)
    return json_response(
        {
            "topic": topic,
            "msg_id": msg_id,
            "state": "cancelled",
            "cancelled_at_ms": out.cancelled_at_ms,
        }
    )
