"""Reply shapes: how a message looks in the JSON the service sends, for the routes and for
the webhook POSTs of push groups (app/push/pusher.py) alike."""

from __future__ import annotations

import base64
from typing import Any

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
