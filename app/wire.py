"""Reply shapes: how a message looks in the JSON the service sends, for the routes and for
the webhook POSTs of push groups (app/push/pusher.py) alike; a JSON reply, and the page
cursors of every listing (the routes, and the listings gathered across partitions)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson
from starlette.responses import Response

from app.errors import InvalidInput
from storage.records import BodyEncoding, MessageRecord
from workers.ops.consume import Received


def message_fields(rec: MessageRecord) -> dict[str, Any]:
    """What every reply showing a message carries: id, body (utf8 or base64), properties,
    tag and due time."""
    if rec.body_encoding is BodyEncoding.BASE64:
        body, encoding = base64.b64encode(rec.body).decode(), "base64"
    else:
        body, encoding = rec.body.decode(), "utf8"
    out: dict[str, Any] = {
        "msg_id": rec.msg_id,
        "body": body,
        "body_encoding": encoding,
        "properties": rec.properties,
        "deliver_at_ms": rec.deliver_at_ms,
    }
    if rec.tag is not None:
        out["tag"] = rec.tag
    return out


def received_item(topic: str, got: Received) -> dict[str, Any]:
    """A received message as a receive reply carries it (a push: without the receipt)."""
    rec = got.record
    out = message_fields(rec)
    out["topic"] = topic
    out["delivered_at_ms"] = rec.delivered_at_ms
    out["attempt"] = got.attempt
    out["receipt"] = got.receipt
    if rec.topic != topic:
        out["source_topic"] = rec.topic
    return out


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def encode_cursor(position: bytes) -> str:
    """A page cursor: the position after the last item, opaque and URL-safe."""
    return base64.urlsafe_b64encode(position).rstrip(b"=").decode()


def bad_cursor() -> InvalidInput:
    reason = "not a cursor from a previous page"
    return InvalidInput(
        f"cursor: {reason}", [{"loc": ["query", "cursor"], "field": "cursor", "reason": reason}]
    )


def decode_cursor(cursor: str | None) -> bytes | None:
    """The position a cursor holds (None: the first page); 422 if it is not one of ours."""
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if not raw:
        raise bad_cursor()
    return raw
