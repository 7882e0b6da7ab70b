"""Recurring schedule routes: put, get, list, delete (api.md v1 additions)."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.auth import allow
from app.config import Role, Settings
from app.defaults import PAGE_DEFAULT, PAGE_MAX
from app.deps import ScheduleIdPath, TopicPath, engine_of, settings_of, writable_topic
from app.errors import InvalidInput, PayloadTooLarge
from app.openapi import BODY, V1, WRITE, json_body, replies
from app.routes.common import parse
from app.schemas import PutSchedule, SchedulePage, ScheduleView
from app.wire import decode_cursor, encode_cursor, json_response
from workers.ops import schedules
from workers.rules import cron
from workers.timers.schedule import Schedule, next_after

router = APIRouter(prefix="/v1/topics/{topic}/schedules", tags=["producer"])


def _bad(field: str, reason: str) -> InvalidInput:
    return InvalidInput(
        f"{field}: {reason}", [{"loc": ["body", field], "field": field, "reason": reason}]
    )


def to_schedule(body: PutSchedule, now_ms: int, settings: Settings) -> Schedule:
    """Check what the schema cannot (one of cron / every_ms, the expression, the zone, the
    window, the limits) and build the schedule to store."""
    if (body.cron is None) == (body.every_ms is None):
        raise _bad(
            "cron" if body.cron is not None else "every_ms", "give exactly one of cron, every_ms"
        )
    try:
        cron.zone(body.timezone)
        if body.cron is not None:
            cron.parse(body.cron)
    except cron.CronError as exc:
        raise _bad("timezone" if "time zone" in str(exc) else "cron", str(exc)) from None
    if body.body_encoding == "base64":
        try:
            size = len(base64.b64decode(body.body, validate=True))
        except (binascii.Error, ValueError):
            raise _bad("body", "not valid base64") from None
    else:
        size = len(body.body.encode())
    if size > settings.max_body_bytes:
        raise PayloadTooLarge(f"body: {size} bytes, over the {settings.max_body_bytes} limit")
    properties = body.properties or {}
    if len(properties) >= settings.max_properties:  # one more is added: schedule_id
        raise _bad("properties", f"{len(properties)} properties, over the limit")
    start, end = body.start_at_ms, body.end_at_ms
    if start is not None and end is not None and end <= start:
        raise _bad("end_at_ms", "must be after start_at_ms")
    # Every fire is a send: none may be further off than ROCKTIMER_MAX_DELAY_MS (which
    # also keeps every fire a date datetime can hold and a valid timer key).
    if start is not None and start - now_ms > settings.max_delay_ms:
        raise _bad("start_at_ms", settings.beyond_max_delay)
    if body.every_ms is not None and body.every_ms > settings.max_delay_ms:
        raise _bad("every_ms", f"longer than the maximum delay of {settings.max_delay_ms} ms")
    spec = Schedule(
        body.cron,
        body.every_ms,
        body.timezone,
        body.body,
        body.body_encoding,
        properties,
        body.tag,
        start,
        end,
        now_ms,
        None,
    )
    first = next_after(spec, now_ms)
    if first is None:
        field = "end_at_ms" if end is not None else "cron"
        raise _bad(field, "the schedule would never fire (its window is over, or no date matches)")
    if first - now_ms > settings.max_delay_ms:
        raise _bad("cron", f"its first fire is {settings.beyond_max_delay}")
    return spec


@router.put(
    "/{schedule_id}",
    operation_id="put_schedule",
    summary="Create or replace a recurring schedule (cron in a time zone, or every_ms)",
    status_code=201,
    openapi_extra=json_body(PutSchedule),
    responses=replies({201: ScheduleView, 200: ScheduleView}, *V1, *BODY, *WRITE, 413),
)
async def put_schedule(topic: TopicPath, schedule_id: ScheduleIdPath, request: Request) -> Response:
    writable_topic(topic)
    engine = engine_of(request)
    spec = to_schedule(
        await parse(request, PutSchedule), engine.clock.now_ms(), settings_of(request)
    )
    created, stored = await engine.put_schedule(topic, schedule_id, spec)
    return json_response(stored.view(topic, schedule_id), 201 if created else 200)


@router.get(
    "/{schedule_id}",
    operation_id="get_schedule",
    summary="A recurring schedule, with its next and last fire",
    responses=replies({200: ScheduleView}, *V1, 404),
)
@allow(Role.PRODUCER, Role.CONSUMER)
async def get_schedule(topic: TopicPath, schedule_id: ScheduleIdPath, request: Request) -> Response:
    found = schedules.get(engine_of(request).store, topic, schedule_id)
    return json_response(found.view(topic, schedule_id))


@router.get(
    "",
    operation_id="list_schedules",
    summary="The topic's recurring schedules, by id",
    responses=replies({200: SchedulePage}, *V1),
)
@allow(Role.PRODUCER, Role.CONSUMER)
async def list_schedules(
    topic: TopicPath,
    request: Request,
    cursor: Annotated[str | None, Query(description="the last page's next_cursor")] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT,
) -> Response:
    after = decode_cursor(cursor)
    after_id = after.decode(errors="replace") if after is not None else None
    items, more = schedules.page(engine_of(request).store, topic, after_id, limit)
    page: dict[str, object] = {"items": [s.view(topic, sid) for sid, s in items]}
    if more:
        page["next_cursor"] = encode_cursor(items[-1][0].encode())
    return json_response(page)


@router.delete(
    "/{schedule_id}",
    operation_id="delete_schedule",
    summary="Delete a recurring schedule: nothing fires after it",
    responses=replies({200: ScheduleView}, *V1, *WRITE, 404),
)
async def delete_schedule(
    topic: TopicPath, schedule_id: ScheduleIdPath, request: Request
) -> Response:
    gone = await engine_of(request).delete_schedule(topic, schedule_id)
    return json_response(gone._replace(next_fire_at_ms=None).view(topic, schedule_id))
