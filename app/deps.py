"""What routes take from the app: the engine, the settings, validated path parameters.

The engine and settings are read off ``request.app.state`` by plain functions rather than
FastAPI dependencies: dependency solving was a third of the event loop's time per send
on a single send), and these two never vary per request.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Request
from pydantic import AfterValidator, TypeAdapter, ValidationError

from app.config import Settings
from app.errors import InvalidInput, invalid
from app.schemas import MSG_ID_PATTERN, NAME_PATTERN, addressable
from storage.keys import INTERNAL_PREFIXES, RESERVED_PREFIXES, is_internal
from workers.engine import Engine


def engine_of(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


TopicPath = Annotated[str, Path(pattern=NAME_PATTERN, description="Topic name (% as %25)")]
GroupPath = Annotated[str, Path(pattern=NAME_PATTERN, description="Consumer group name")]
ScheduleIdPath = Annotated[
    str,
    Path(pattern=MSG_ID_PATTERN, max_length=100, description="Recurring schedule id"),
    AfterValidator(addressable),
]
MsgIdPath = Annotated[
    str,
    Path(pattern=MSG_ID_PATTERN, description="Message id (uniq key)"),
    AfterValidator(addressable),
]


def _reserved(topic: str, reason: str) -> InvalidInput:
    return InvalidInput(
        f"topic: {reason}", [{"loc": ["path", "topic"], "field": "topic", "reason": reason}]
    )


def writable_topic(topic: str) -> str:
    """A topic a producer may send to: none of the service's own."""
    if topic.startswith(RESERVED_PREFIXES):
        raise _reserved(topic, f"names starting with {', '.join(RESERVED_PREFIXES)} are reserved")
    return topic


def readable_topic(topic: str) -> str:
    """A topic a group may read: any but the internal timer lanes (%DLQ% is readable)."""
    if is_internal(topic):
        raise _reserved(topic, f"names starting with {', '.join(INTERNAL_PREFIXES)} are internal")
    return topic


# Every path parameter's one declaration, by name: FastAPI validates and documents it from
# the Annotated type, and the fast path (app/fastpath.py) runs that same type's validator,
# so both answer a bad id alike (pattern, length, ``.`` and ``..``).
PATH_PARAMS: dict[str, Any] = {
    "topic": TopicPath,
    "group": GroupPath,
    "msg_id": MsgIdPath,
    "schedule_id": ScheduleIdPath,
}
_VALIDATORS = {name: TypeAdapter(kind) for name, kind in PATH_PARAMS.items()}
# Values that passed, by parameter: a hot route's topic and group repeat from request to
# request, and a set lookup is a fraction of a validation. Bounded: emptied when full.
_PASSED: dict[str, set[str]] = {name: set() for name in PATH_PARAMS}
PASSED_MAX = 4_096


def path_param(name: str, value: str) -> str:
    """``value`` of the path parameter ``name``, validated as the FastAPI route does (the
    same 422 problem: loc ``["path", name]``)."""
    passed = _PASSED[name]
    if value in passed:
        return value
    try:
        valid: str = _VALIDATORS[name].validate_python(value)
    except ValidationError as exc:
        raise invalid(exc, ("path", name)) from None
    if len(passed) >= PASSED_MAX:
        passed.clear()
    passed.add(valid)
    return valid
