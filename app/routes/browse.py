"""Browsing routes for the console and the CLI (api.md, Browsing): topics, a topic's
groups, a topic's scheduled messages. Read-only, paged, never counting by a scan."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.defaults import PAGE_DEFAULT, PAGE_MAX
from app.deps import TopicPath, engine_of
from app.openapi import V1, replies
from app.routes.producers import message_view
from app.schemas import NAME_PATTERN, GroupPage, MessagePage, TopicPage
from app.wire import bad_cursor, decode_cursor, encode_cursor, json_response
from storage import keys
from storage.errors import CorruptRecordError
from storage.records import IndexEntry, MessageState

router = APIRouter(prefix="/v1/topics")

Cursor = Annotated[str | None, Query(max_length=512, description="next_cursor of the last page")]
Limit = Annotated[int, Query(ge=1, le=PAGE_MAX, description="Most items in the page")]
NAME = re.compile(NAME_PATTERN)


def _name_cursor(cursor: str | None) -> str | None:
    """A cursor that holds a topic or group name."""
    raw = decode_cursor(cursor)
    if raw is None:
        return None
    try:
        name = raw.decode()
    except UnicodeDecodeError:
        raise bad_cursor() from None
    if not NAME.fullmatch(name):
        raise bad_cursor()
    return name


def _page(items: list[dict[str, Any]], next_position: bytes | None) -> Response:
    page: dict[str, Any] = {"items": items}
    if next_position is not None:
        page["next_cursor"] = encode_cursor(next_position)
    return json_response(page)


@router.get(
    "",
    operation_id="list_topics",
    summary="Topics by name, with their scheduled, delivered and cancelled counts",
    tags=["consumer"],
    responses=replies({200: TopicPage}, *V1),
)
async def list_topics(
    request: Request, cursor: Cursor = None, limit: Limit = PAGE_DEFAULT
) -> Response:
    found, more = engine_of(request).topics(_name_cursor(cursor), limit)
    items = [t._asdict() for t in found]
    return _page(items, found[-1].topic.encode() if more and found else None)


@router.get(
    "/{topic}/groups",
    operation_id="list_groups",
    summary="The topic's consumer groups by name: backlog, in flight, retrying, dead",
    tags=["consumer"],
    responses=replies({200: GroupPage}, *V1),
)
async def list_groups(
    topic: TopicPath, request: Request, cursor: Cursor = None, limit: Limit = PAGE_DEFAULT
) -> Response:
    engine = engine_of(request)
    found, more = engine.groups(topic, _name_cursor(cursor), limit)
    items = []
    for g in found:
        settings = engine.group_settings(topic, g.group)
        item = {**g._asdict(), "filter": settings.filter}
        if settings.push is not None:  # api.md: `push?`, left out while a group has none
            item["push"] = settings.push.shown()
        items.append(item)
    return _page(items, found[-1].group.encode() if more and found else None)


@router.get(
    "/{topic}/messages",
    operation_id="list_messages",
    summary="The topic's scheduled messages in due order",
    tags=["producer"],
    responses=replies({200: MessagePage}, *V1),
)
async def list_messages(
    topic: TopicPath,
    request: Request,
    state: Annotated[Literal["scheduled"], Query(description="Which messages")] = "scheduled",
    cursor: Cursor = None,
    limit: Limit = PAGE_DEFAULT,
) -> Response:
    after = decode_cursor(cursor)
    if after is not None:
        try:
            timer = keys.decode_timer_key(after)
        except CorruptRecordError:
            raise bad_cursor() from None
        if timer.target != topic:
            raise bad_cursor()
    found, resume = engine_of(request).scheduled(topic, after, limit)
    items = [
        message_view(
            topic,
            rec.msg_id,
            IndexEntry(MessageState.SCHEDULED, rec.deliver_at_ms, rec.created_at_ms),
            rec,
        )
        for rec in found
    ]
    return _page(items, resume)
