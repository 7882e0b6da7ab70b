"""The HTTP contract's bodies (api.md), as named schemas so generated clients read well.

Request bodies are validated straight from the raw bytes (``model_validate_json``, strict:
a JSON string is not an int, unknown fields are refused); responses are written with
orjson from the same shapes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.defaults import (
    INVISIBLE_MS,
    INVISIBLE_MS_MAX,
    INVISIBLE_MS_MIN,
    MAX_BATCH,
    RECEIVE_WAIT_MS_MAX,
)
from workers.rules import tagfilter
from workers.rules.retry import DELAY_LEVELS_MS, GroupSettings
from workers.rules.webhook import MAX_RETRY_DELAY_MS, PushSettings

NAME_PATTERN = r"^[%|a-zA-Z0-9_-]{1,127}$"
MSG_ID_CHARS = "A-Za-z0-9._:-"  # what a msg_id is made of (the inside of a regex class)
MSG_ID_MAX = 128
MSG_ID_PATTERN = rf"^[{MSG_ID_CHARS}]{{1,{MSG_ID_MAX}}}$"
U63 = 2**63 - 1  # times and durations fit a signed 64-bit int in every client language

UNADDRESSABLE_IDS = frozenset({".", ".."})  # match the pattern, but a URL path drops them
PROPERTY_VALUE_MAX = 4096  # characters of one property's value


def addressable(msg_id: str) -> str:
    """Refuse the ids (msg_id, schedule_id) no URL can name (``.../messages/..`` is the
    parent path)."""
    if msg_id in UNADDRESSABLE_IDS:
        raise ValueError("'.' and '..' cannot be addressed in a URL")
    return msg_id


MsgId = Annotated[
    str, Field(pattern=MSG_ID_PATTERN, examples=["order-42"]), AfterValidator(addressable)
]


def nameable(tag: str) -> str:
    """Refuse a tag no tag filter could name (a group would receive it only with ``*``)."""
    problem = tagfilter.tag_problem(tag)
    if problem is not None:
        raise ValueError(problem)
    return tag


Tag = Annotated[str, Field(min_length=1, max_length=tagfilter.TAG_MAX), AfterValidator(nameable)]
Millis = Annotated[int, Field(ge=0, le=U63)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _absent_not_null(schema: dict[str, Any]) -> None:
    """Replies leave an absent member out and never send null: say so in the schema, so
    generated clients type it ``Unset | int`` rather than ``None | Unset | int``."""
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        branches = prop.get("anyOf")
        if name in required or not branches or "default" not in prop:
            continue
        kept = [b for b in branches if b != {"type": "null"}]
        if len(kept) < len(branches) and prop["default"] is None:
            del prop["anyOf"], prop["default"]
            if len(kept) == 1:
                prop.update(kept[0])
            else:
                prop["anyOf"] = kept


class _Reply(BaseModel):
    model_config = ConfigDict(json_schema_extra=_absent_not_null)


class SendMessage(_Strict):
    """One message to schedule. At most one of deliver_at_ms, delay_ms, delay_level;
    none means now."""

    msg_id: MsgId | None = None
    body: str
    body_encoding: Literal["utf8", "base64"] = "utf8"
    properties: dict[str, Annotated[str, Field(max_length=PROPERTY_VALUE_MAX)]] | None = None
    tag: Tag | None = None
    deliver_at_ms: Millis | None = None
    delay_ms: Millis | None = None
    delay_level: Annotated[int, Field(ge=1, le=len(DELAY_LEVELS_MS))] | None = None


# The batch route's first reading (app/routes/producers.py): SendMessage with its two
# Python-checked fields checked by patterns instead, so a batch's thousand messages are
# validated in Rust alone (the validators cost a third of a bulk load's parse). The msg_id
# pattern takes exactly what MsgId takes (one or two dots alone are the unaddressable
# ids); the tag pattern a part of what Tag takes: printable ASCII but space, '|' and '*',
# which tagfilter.tag_problem passes. A batch it refuses is read again with SendBatch,
# so it refuses nothing SendBatch takes.
_BUT_DOT = MSG_ID_CHARS.replace(".", "")
PLAIN_MSG_ID_PATTERN = (  # a first character not a dot, or one dot, or two and more
    rf"^(?:[{_BUT_DOT}][{MSG_ID_CHARS}]{{0,{MSG_ID_MAX - 1}}}"
    rf"|\.[{_BUT_DOT}][{MSG_ID_CHARS}]{{0,{MSG_ID_MAX - 2}}}"
    rf"|\.\.[{MSG_ID_CHARS}]{{1,{MSG_ID_MAX - 2}}})$"
)
PLAIN_TAG_PATTERN = rf"^[!-)+-{{}}~]{{1,{tagfilter.TAG_MAX}}}$"


class PlainSendMessage(SendMessage):
    """SendMessage as a batch is read first (see PLAIN_MSG_ID_PATTERN)."""

    msg_id: Annotated[str, Field(pattern=PLAIN_MSG_ID_PATTERN)] | None = None
    tag: Annotated[str, Field(pattern=PLAIN_TAG_PATTERN)] | None = None


class RescheduleMessage(_Strict):
    """The new delivery time: exactly one of deliver_at_ms, delay_ms (from now),
    delay_level. A time already past delivers at once."""

    deliver_at_ms: Millis | None = None
    delay_ms: Millis | None = None
    delay_level: Annotated[int, Field(ge=1, le=len(DELAY_LEVELS_MS))] | None = None


CronText = Annotated[str, Field(min_length=1, max_length=256, examples=["30 2 * * MON-FRI"])]


class PutSchedule(_Strict):
    """A recurring schedule: exactly one of cron (five fields, in ``timezone``) and
    every_ms; each fire is one message with this body, properties and tag."""

    cron: (
        Annotated[str, Field(min_length=1, max_length=256, examples=["30 2 * * MON-FRI"])] | None
    ) = None
    every_ms: Annotated[int, Field(ge=1_000, le=U63)] | None = None
    timezone: Annotated[str, Field(min_length=1, max_length=64, examples=["Europe/Berlin"])] = "UTC"
    body: str
    body_encoding: Literal["utf8", "base64"] = "utf8"
    properties: dict[str, Annotated[str, Field(max_length=PROPERTY_VALUE_MAX)]] | None = None
    tag: Tag | None = None
    start_at_ms: Millis | None = None
    end_at_ms: Millis | None = None


class ScheduleView(BaseModel):
    topic: str
    schedule_id: str
    cron: str | None
    every_ms: int | None
    timezone: str
    body: str
    body_encoding: Literal["utf8", "base64"]
    properties: dict[str, str]
    tag: str | None
    start_at_ms: int | None
    end_at_ms: int | None
    created_at_ms: int
    next_fire_at_ms: int | None
    last_fire_at_ms: int | None = None


class SchedulePage(BaseModel):
    items: list[ScheduleView]
    next_cursor: str | None = None


class SendBatch(_Strict):
    """Up to 1000 messages; each succeeds or fails on its own."""

    messages: Annotated[list[SendMessage], Field(min_length=1, max_length=MAX_BATCH)]


class PlainSendBatch(_Strict):
    """SendBatch read with PlainSendMessage: the batch route's common case."""

    messages: Annotated[list[PlainSendMessage], Field(min_length=1, max_length=MAX_BATCH)]


class BatchEnvelope(_Strict):
    """How a batch is parsed: items are validated one by one (see SendBatch for the schema)."""

    messages: Annotated[list[Any], Field(min_length=1, max_length=MAX_BATCH)]


MessageStateName = Literal["scheduled", "delivered", "cancelled"]


class SendResult(_Reply):
    topic: str
    msg_id: str
    state: MessageStateName
    deliver_at_ms: int
    created_at_ms: int


class BatchItemResult(_Reply):
    index: int
    status: int
    msg_id: str | None = None
    state: MessageStateName | None = None
    deliver_at_ms: int | None = None
    error: str | None = None


class BatchResult(_Reply):
    results: list[BatchItemResult]


class MessageView(_Reply):
    topic: str
    msg_id: str
    state: MessageStateName
    deliver_at_ms: int
    created_at_ms: int
    delivered_at_ms: int | None = None
    cancelled_at_ms: int | None = None
    tag: str | None = None
    properties: dict[str, str]


class CancelResult(_Reply):
    topic: str
    msg_id: str
    state: Literal["cancelled"]
    cancelled_at_ms: int


class ReceiveRequest(_Strict):
    max_messages: Annotated[int, Field(ge=1, le=MAX_BATCH)] = 16
    wait_ms: Annotated[int, Field(ge=0, le=RECEIVE_WAIT_MS_MAX)] = 0
    invisible_ms: Annotated[int, Field(ge=INVISIBLE_MS_MIN, le=INVISIBLE_MS_MAX)] = INVISIBLE_MS


class ReceivedMessage(_Reply):
    topic: str
    msg_id: str
    source_topic: str | None = None  # set on dead letters: the topic it failed on
    body: str
    body_encoding: Literal["utf8", "base64"]
    properties: dict[str, str]
    tag: str | None = None
    deliver_at_ms: int
    delivered_at_ms: int
    attempt: int
    receipt: str


class ReceiveResult(_Reply):
    messages: list[ReceivedMessage]


Receipt = Annotated[str, Field(min_length=1, max_length=512)]


class AckRequest(_Strict):
    receipts: Annotated[list[Receipt], Field(min_length=1, max_length=MAX_BATCH)]


class ReceiptResult(_Reply):
    receipt: str
    status: Literal["acked", "expired", "unknown"]


class AckResult(_Reply):
    results: list[ReceiptResult]


class NackRequest(_Strict):
    receipts: Annotated[list[Receipt], Field(min_length=1, max_length=MAX_BATCH)]
    delay_ms: Annotated[int, Field(ge=0, le=MAX_RETRY_DELAY_MS)] | None = None


class NackReceiptResult(_Reply):
    receipt: str
    status: Literal["nacked", "expired", "unknown"]


class NackResult(_Reply):
    results: list[NackReceiptResult]


class InvisibilityRequest(_Strict):
    receipt: Receipt
    invisible_ms: Annotated[int, Field(ge=INVISIBLE_MS_MIN, le=INVISIBLE_MS_MAX)]


class InvisibilityResult(_Reply):
    receipt: str


class GroupMessageState(_Reply):
    state: Literal["pending", "inflight", "retrying", "acked", "dead", "filtered"]
    attempts: int
    next_visible_ms: int | None = None
    last_failure_ms: int | None = None


class DeadLetterItem(_Reply):
    topic: str
    msg_id: str
    attempts: int
    last_failure_ms: int
    dead_at_ms: int


class DeadLetterPage(_Reply):
    items: list[DeadLetterItem]
    next_cursor: str | None = None


class DeadLetterDetail(DeadLetterItem):
    """A dead letter with the message itself, for inspection before a redrive."""

    group: str
    body: str
    body_encoding: Literal["utf8", "base64"]
    properties: dict[str, str]
    tag: str | None = None
    deliver_at_ms: int


class RedriveResult(_Reply):
    topic: str
    group: str
    msg_id: str
    state: Literal["pending"]


class TopicItem(_Reply):
    """A topic and its counts (kept as messages change, never counted by a scan)."""

    topic: str
    scheduled: int = Field(description="Messages scheduled, not yet due")
    delivered: int = Field(description="Messages delivered into the topic since it began")
    cancelled: int = Field(description="Messages cancelled since the topic began")


class TopicPage(_Reply):
    items: list[TopicItem]
    next_cursor: str | None = None


class GroupItem(_Reply):
    """A consumer group of a topic and where it stands."""

    group: str
    backlog: int = Field(description="Messages the group has not received yet")
    inflight: int = Field(description="Received, not yet acked or failed")
    retrying: int = Field(description="Failed, waiting for the retry delay")
    dead: int = Field(description="Dead letters from this topic")
    filter: str = Field(description="Tag filter expression ('*': every message)")
    push: PushSettings | None = Field(
        None, description="Push delivery settings (the secret shown null); absent if none"
    )


class GroupPage(_Reply):
    items: list[GroupItem]
    next_cursor: str | None = None


class MessagePage(_Reply):
    items: list[MessageView]
    next_cursor: str | None = Field(
        None,
        description="Present while more may follow; a page may be short (even empty) "
        "and still have a next one",
    )


class FieldError(_Reply):
    loc: list[str | int]
    field: str
    reason: str


class Problem(_Reply):
    """RFC 9457 problem details: every error the service returns has this shape."""

    type: str  # "about:blank": the status code says it all
    title: str
    status: int
    detail: str
    errors: list[FieldError] | None = None


class Identity(_Reply):
    """Who the caller is: the role of its API key, or admin when the service is open."""

    role: Literal["producer", "consumer", "admin"]
    open: bool


class DueAhead(_Reply):
    bucket_ms: int
    counts: list[int]  # scheduled messages due in each bucket from now on
    capped: bool  # the bounded scan stopped early: counts cover less than the hour


class LatenessSummary(_Reply):
    count: int
    p50_ms: float | None = None  # upper bound of the histogram bucket holding it
    p99_ms: float | None = None


class Stats(_Reply):
    """The console's overview, in one cheap call (bounded work, never a count of the store)."""

    now_ms: int
    pending_timers: int
    delivered_total: int
    writer_queue: int
    long_polls: int
    lateness: LatenessSummary
    due_ahead: DueAhead


class Health(_Reply):
    status: str  # alive (healthz); ready, or lagging: deliveries behind, sends get 429
    pending_timers: int | None = None
    writer_queue: int | None = None
    due_backlog_timers: int | None = None
    due_backlog_oldest_ms: int | None = None


class Limits(_Reply):
    """What the service accepts, for clients that size their requests (the bulk loader):
    its settings, not the client's."""

    max_request_bytes: int  # one request's body
    max_batch: int  # items of one batch request
    max_body_bytes: int  # one message's body, decoded
    max_properties: int
    max_delay_ms: int  # a deliver time at most this far from now
    partitions: int  # the data dir's partitions: a topic's is crc32(name) % partitions


REQUEST_MODELS: tuple[type[BaseModel], ...] = (
    SendMessage,
    SendBatch,
    RescheduleMessage,
    PutSchedule,
    ReceiveRequest,
    AckRequest,
    NackRequest,
    InvisibilityRequest,
    GroupSettings,
)
