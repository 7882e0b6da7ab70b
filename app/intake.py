"""Validating a message on its way in: what the request schema cannot check (the deliver
time against now and the maximum delay, base64, the body and property limits), and the
record it becomes. One home for the send routes, the bulk loader (pipeline/rows.py) and
anything else that takes messages in, so each refuses exactly what the others do."""

from __future__ import annotations

import base64
import binascii

from app.config import Settings
from app.errors import InvalidInput, PayloadTooLarge
from app.schemas import RescheduleMessage, SendMessage
from storage.records import NO_PROPERTIES, BodyEncoding, MessageRecord
from workers.rules.retry import DELAY_LEVELS_MS

JSON_TYPES = ("application/json",)


def json_media(declared: str) -> bool:
    """A Content-Type value that says JSON (application/json, application/*+json)."""
    media = declared.split(";", 1)[0].strip().lower()
    return media in JSON_TYPES or (media.startswith("application/") and media.endswith("+json"))


def bad_field(loc: list[str | int], field: str, reason: str) -> InvalidInput:
    """The 422 of one bad field at ``loc`` (``["body", "messages", 3]``, say)."""
    return InvalidInput(
        f"{field}: {reason}", [{"loc": [*loc, field], "field": field, "reason": reason}]
    )


def deliver_time(
    msg: SendMessage | RescheduleMessage,
    now_ms: int,
    settings: Settings,
    loc: list[str | int],
    *,
    required: bool = False,
) -> int:
    """The deliver time a body asks for: at most one of deliver_at_ms, delay_ms and
    delay_level (exactly one if ``required``; else none means now), within the maximum."""
    at, delay, level = msg.deliver_at_ms, msg.delay_ms, msg.delay_level
    given_n = (at is not None) + (delay is not None) + (level is not None)
    if given_n > 1:  # a count, not a list: this runs for every message of a batch
        given = [f for f in _WHEN if getattr(msg, f) is not None]
        joined = " and ".join(given)
        raise bad_field(loc, given[1], f"give at most one of {', '.join(_WHEN)} (got {joined})")
    if not given_n and required:
        raise bad_field(loc, "deliver_at_ms", f"give one of {', '.join(_WHEN)}")
    if at is not None:
        deliver_at, field = at, "deliver_at_ms"
    elif delay is not None:
        deliver_at, field = now_ms + delay, "delay_ms"
    elif level is not None:
        deliver_at, field = now_ms + DELAY_LEVELS_MS[level - 1], "delay_level"
    else:
        deliver_at, field = now_ms, "deliver_at_ms"
    if deliver_at - now_ms > settings.max_delay_ms:
        raise bad_field(loc, field, settings.beyond_max_delay)
    return deliver_at


_WHEN = ("deliver_at_ms", "delay_ms", "delay_level")


def to_record(
    topic: str,
    msg: SendMessage,
    now_ms: int,
    settings: Settings,
    loc: list[str | int],
    msg_id: str,
) -> MessageRecord:
    """Check what the schema cannot (limits, the delay against now) and build the record;
    ``msg_id``: the message's own, or a server-made one (app/ids.py) if it has none."""

    deliver_at = deliver_time(msg, now_ms, settings, loc)
    if msg.body_encoding == "base64":
        try:
            body = base64.b64decode(msg.body, validate=True)
        except (binascii.Error, ValueError):
            raise bad_field(loc, "body", "not valid base64") from None
        encoding = BodyEncoding.BASE64
    else:
        body, encoding = msg.body.encode(), BodyEncoding.UTF8
    if len(body) > settings.max_body_bytes:
        raise PayloadTooLarge(f"body: {len(body)} bytes, over the {settings.max_body_bytes} limit")
    properties = msg.properties or NO_PROPERTIES
    if len(properties) > settings.max_properties:
        raise bad_field(
            loc,
            "properties",
            f"{len(properties)} properties, over the {settings.max_properties} limit",
        )
    # tuple.__new__ with every field: a NamedTuple's own __new__ (keywords, defaults) is a
    # Python call at four times the cost, paid by every message of a batch.
    return tuple.__new__(
        MessageRecord,
        (topic, msg_id, deliver_at, now_ms, body, encoding, msg.tag, properties, 0),
    )
