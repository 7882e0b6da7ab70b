"""One input row of a bulk load → a message for the batch API, or a reject (field, reason).

The checks are the service's own (``SendMessage`` and ``to_record``, imported), run in the
executors before anything is sent, for every row whose item the JVM did not build
(``pipeline/items.py`` builds those it finds surely valid, and words no reject); what only
a loader has is here: CSV's text numbers, properties as a JSON string, local wall-clock
times with a time zone, and the ids for rows that come without one.

Local times (``deliver_at`` without an offset + ``timezone``) follow java.time's rule, the
one Spark and most schedulers use: a time that does not exist (the spring-forward gap) is
moved later by the length of the gap (02:30 → 03:30), and an ambiguous one (the autumn
overlap) is the earlier of the two instants (the first 01:30).
"""

from __future__ import annotations

import functools
import hashlib
import re
from datetime import UTC, datetime
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson
from pydantic import ValidationError

from app.config import Settings
from app.deps import writable_topic
from app.errors import InvalidInput, PayloadTooLarge, invalid
from app.intake import to_record
from app.schemas import NAME_PATTERN, SendMessage

SCHEDULE_FIELDS = ("deliver_at_ms", "delay_ms", "delay_level")
# Every column a row may have (pipeline.md §2); others are kept in rejects but not sent.
COLUMNS = (
    "topic",
    "msg_id",
    "body",
    "body_encoding",
    "properties",
    "tag",
    *SCHEDULE_FIELDS,
    "deliver_at",
    "timezone",
)
_TOPIC = re.compile(NAME_PATTERN)
_INTEGER = re.compile(r"^[+-]?\d+$")
ZONES_CACHED = 1_024  # distinct time zone names remembered (IANA has ~600)
LOCAL_TIMES_CACHED = 65_536  # distinct (deliver_at, timezone) pairs remembered
_UNUSED_ID = "-"  # to_record wants an id; the real one is chosen after it passes


class Reject(NamedTuple):
    field: str
    reason: str


class Message(NamedTuple):
    topic: str
    item: dict[str, Any]  # the batch API's item, msg_id always set


def to_message(
    row: dict[str, Any], now_ms: int, settings: Settings, ordinal: int = 0
) -> Message | Reject:
    """Validate ``row`` as the service would at ``now_ms``; ``ordinal`` tells identical
    rows without a msg_id apart (the k-th copy gets its own id).

    No row can end the job: a value no check foresaw is a reject naming the error, so the
    file's other rows still load and the summary still adds up."""
    try:
        return _to_message(row, now_ms, settings, ordinal)
    except Exception as exc:
        return Reject("row", f"could not be checked: {type(exc).__name__}: {exc}")


def _to_message(
    row: dict[str, Any], now_ms: int, settings: Settings, ordinal: int
) -> Message | Reject:
    topic = text(row.get("topic"))
    if topic is None:
        return Reject("topic", "missing")
    bad_topic = _topic_reject(topic)
    if bad_topic is not None:
        return bad_topic
    item: dict[str, Any] = {}
    for name in _TEXT_FIELDS:
        value = row.get(name)
        if value is not None and value != "":
            item[name] = value
    body = row.get("body")
    if body is not None:
        item["body"] = body
    for name in SCHEDULE_FIELDS:
        value = row.get(name)
        if value is None or value == "":
            continue
        number = value if type(value) is int else _integer(value)
        if number is None:
            return Reject(name, f"not an integer: {value!r}")
        item[name] = number
    local = _local_time(row, item)
    if isinstance(local, Reject):
        return local
    if local is not None:
        item["deliver_at_ms"] = local
    properties = row.get("properties")
    if properties is not None and properties != "":
        if isinstance(properties, str):
            try:
                properties = orjson.loads(properties)
            except orjson.JSONDecodeError:
                return Reject("properties", "not valid JSON")
        if not isinstance(properties, dict):
            return Reject("properties", "not a JSON object of strings")
        item["properties"] = properties
    try:
        msg = SendMessage.model_validate(item, strict=True)
        to_record(topic, msg, now_ms, settings, [], _UNUSED_ID)
    except ValidationError as exc:
        return _first(invalid(exc, ()))
    except InvalidInput as exc:
        reject = _first(exc)
        if local is not None and reject.field == "deliver_at_ms":
            return Reject("deliver_at", reject.reason)
        return reject
    except PayloadTooLarge as exc:
        return Reject("body", str(exc).removeprefix("body: "))
    if "msg_id" not in item:
        item["msg_id"] = content_id(topic, item, ordinal)
    return Message(topic, item)


_TEXT_FIELDS = ("msg_id", "body_encoding", "tag")  # sent only when not empty (body: always)
TOPICS_CACHED = 65_536  # distinct topic names whose verdict is remembered


@functools.lru_cache(maxsize=TOPICS_CACHED)
def _topic_reject(topic: str) -> Reject | None:
    """The service's verdict on a topic name (a file has few topics and millions of rows)."""
    if not _TOPIC.match(topic):
        return Reject("topic", f"does not match {NAME_PATTERN}")
    try:
        writable_topic(topic)
    except InvalidInput as exc:
        return _first(exc)
    return None


def content_id(topic: str, item: dict[str, Any], ordinal: int) -> str:
    """A msg_id from what the row says (not where it sits in the file): the same row gives
    the same id in a retried task, a second run, or the file fixed and loaded again."""
    return hashed_id(orjson.dumps([topic, item], option=orjson.OPT_SORT_KEYS), ordinal)


def hashed_id(content: bytes, ordinal: int) -> str:
    """The msg_id of a row whose ``[topic, item]`` is ``content`` (JSON, keys sorted, no
    spaces: what ``content_id`` hashes, and what the bulk loader's SQL writes)."""
    digest = hashlib.blake2b(content, digest_size=16).hexdigest()
    return f"bl-{digest}" if ordinal == 0 else f"bl-{digest}-{ordinal}"


@functools.lru_cache(maxsize=LOCAL_TIMES_CACHED)
def local_to_ms(text: str, timezone: str | None) -> int | Reject:
    """``deliver_at`` (+ ``timezone`` when it has no offset) → ms since the epoch, UTC
    (a pure function: "09:00 local" rows repeat a few dates in a few zones)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return Reject("deliver_at", f"not an ISO-8601 date-time: {text!r}")
    if when.tzinfo is not None:
        if timezone:
            return Reject("timezone", "deliver_at already has a UTC offset; give one or the other")
    elif not timezone:
        return Reject("timezone", "missing: deliver_at is a local time")
    else:
        zone = _zone(timezone)
        if zone is None:
            return Reject("timezone", f"unknown time zone {timezone!r}")
        # fold=0: a gap moves later by its length, an overlap takes the first instant.
        when = when.replace(tzinfo=zone, fold=0)
    try:
        return int(when.astimezone(UTC).timestamp() * 1000)
    except (OverflowError, ValueError):
        # Years 1 and 9999 in a zone off UTC fall outside what datetime can hold.
        return Reject("deliver_at", f"{text!r} is outside the years 1-9999 in UTC")


@functools.lru_cache(maxsize=ZONES_CACHED)
def _zone(name: str) -> ZoneInfo | None:
    """The zone of an IANA name, None if unknown (ZoneInfo keeps only 8 zones and looks an
    unknown name up on disk every time: a file's zones are few, its rows millions).

    Unknown includes what tzdata has as a directory (``Europe``), a name the file system
    refuses (too long, a NUL) and a file that is not a zone: ZoneInfo raises OSError or
    ValueError for those, not ZoneInfoNotFoundError."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def _local_time(row: dict[str, Any], item: dict[str, Any]) -> int | Reject | None:
    when, timezone = text(row.get("deliver_at")), text(row.get("timezone"))
    if when is None:
        return Reject("timezone", "only with deliver_at") if timezone else None
    given = [name for name in SCHEDULE_FIELDS if name in item]
    if given:
        return Reject(
            "deliver_at",
            f"give one of deliver_at, {', '.join(SCHEDULE_FIELDS)} (also got {given[0]})",
        )
    return local_to_ms(when, timezone)


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER.match(value.strip()):
        return int(value)
    return None


def text(value: Any) -> str | None:
    """A value as to_message reads text: stripped, None when empty."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _first(exc: InvalidInput) -> Reject:
    error = exc.errors[0]
    return Reject(str(error["field"]), str(error["reason"]))
