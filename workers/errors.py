"""Domain errors: what a request asked for cannot be done (mapped to HTTP in app/errors.py)."""

from __future__ import annotations

from storage.errors import RocktimerError


class MessageNotFound(RocktimerError):
    """No message with this (topic, msg_id)."""


class MessageConflict(RocktimerError):
    """The message's state forbids the request (cancel a delivered one, re-send a cancelled one)."""


class ScheduleNotFound(MessageNotFound):
    """No recurring schedule with this (topic, schedule_id) (a 404 like a message's)."""
