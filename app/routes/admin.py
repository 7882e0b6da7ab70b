"""Admin routes: set group settings, list dead letters, redrive (api.md, Consumer)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.defaults import PAGE_DEFAULT, PAGE_MAX
from app.deps import GroupPath, MsgIdPath, TopicPath, engine_of, readable_topic, settings_of
from app.errors import InvalidInput
from app.openapi import BODY, V1, WRITE, json_body, replies
from app.routes.common import parse
from app.schemas import DeadLetterDetail, DeadLetterPage, RedriveResult
from app.wire import bad_cursor, decode_cursor, encode_cursor, json_response, message_fields
from storage import keys
from storage.errors import MessageNotFound
from workers.rules.retry import GroupSettings
from workers.rules.webhook import host_allowed

router = APIRouter(
    prefix="/v1/topics/{topic}/groups/{group}",
    tags=["admin"],
)


@router.put(
    "",
    operation_id="put_group_settings",
    summary="Set the group's max_attempts, retry policy, tag filter and push delivery",
    openapi_extra=json_body(GroupSettings),
    responses=replies({200: GroupSettings}, *V1, *BODY, *WRITE),
)
async def put_group_settings(topic: TopicPath, group: GroupPath, request: Request) -> Response:
    engine = engine_of(request)
    readable_topic(topic)  # no group reads an internal lane: settings there would be dead
    settings = await parse(request, GroupSettings)
    if settings.push is not None:
        allowed = settings_of(request).allowed_push_hosts
        if not host_allowed(settings.push.host, allowed):
            reason = f"host {settings.push.host!r} is not in ROCKTIMER_PUSH_ALLOWED_HOSTS"
            where = {"loc": ["body", "push", "url"], "field": "push.url", "reason": reason}
            raise InvalidInput(f"push.url: {reason}", [where])
    stored = await engine.put_group_settings(topic, group, settings)
    request.app.state.pusher.changed(topic, group, stored)
    return json_response(stored.shown())


def _cursor(topic: str, group: str, cursor: str | None) -> bytes | None:
    raw = decode_cursor(cursor)
    if raw is None:
        return None
    if len(raw) != keys.DEAD_POSITION_BYTES:
        raise bad_cursor()
    return keys.dead_key_at(topic, group, raw)


@router.get(
    "/dlq",
    operation_id="list_dead_letters",
    summary="The group's dead letters from this topic, oldest first",
    responses=replies({200: DeadLetterPage}, *V1),
)
async def list_dead_letters(
    topic: TopicPath,
    group: GroupPath,
    request: Request,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT,
) -> Response:
    engine = engine_of(request)
    found, more = engine.dead_letters(topic, group, _cursor(topic, group, cursor), limit)
    page: dict[str, object] = {
        "items": [
            {
                "topic": topic,
                "msg_id": d.msg_id,
                "attempts": d.attempts,
                "last_failure_ms": d.last_failure_ms,
                "dead_at_ms": d.dead_at_ms,
            }
            for _, d in found
        ]
    }
    if more and found:
        page["next_cursor"] = encode_cursor(keys.dead_position(found[-1][0]))
    return json_response(page)


@router.get(
    "/dlq/{msg_id}",
    operation_id="get_dead_letter",
    summary="One dead letter with its body and properties",
    responses=replies(
        {200: DeadLetterDetail},
        *V1,
        404,
        why={404: "Not a dead letter of this group from this topic"},
    ),
)
async def get_dead_letter(
    topic: TopicPath, group: GroupPath, msg_id: MsgIdPath, request: Request
) -> Response:
    engine = engine_of(request)
    dead = engine.dead_letter(topic, group, msg_id)
    record = engine.status(topic, msg_id).record
    if record is None:  # swept from the topic log at the same instant
        raise MessageNotFound(f"{msg_id!r} from topic {topic!r} is not a dead letter of {group!r}")
    detail = message_fields(record)
    detail.update(
        topic=topic,
        group=group,
        msg_id=msg_id,
        attempts=dead.attempts,
        last_failure_ms=dead.last_failure_ms,
        dead_at_ms=dead.dead_at_ms,
    )
    return json_response(detail)


@router.post(
    "/dlq/{msg_id}/redrive",
    operation_id="redrive_dead_letter",
    summary="Put a dead letter back into the group's flow, attempts reset",
    responses=replies(
        {200: RedriveResult}, *V1, *WRITE, 404, why={404: "Not a dead letter of this group"}
    ),
)
async def redrive_dead_letter(
    topic: TopicPath, group: GroupPath, msg_id: MsgIdPath, request: Request
) -> Response:
    engine = engine_of(request)
    await engine.redrive(topic, group, msg_id)
    return json_response({"topic": topic, "group": group, "msg_id": msg_id, "state": "pending"})
