"""Staging events: the one way an op records a state change in the event log.

An op calls ``emit`` (or ``emit_many``) beside the writes of the change; the Txn numbers
its events and writes them in the same WriteBatch (storage/txn.py, commit), so a crash
keeps the change and its event, or neither. An op that fails is rolled back with its
events (Txn savepoints). The codec and the kinds are in storage/events.py.

Any op that changes a message's state adds one line, e.g. a reschedule (``record`` is
the new encoded record, so ``deliver_at_ms`` is the new due time)::

    events.emit(txn, EventKind.RESCHEDULED, encoded_record)

and an op on a group's message names the group::

    events.emit(txn, EventKind.ACKED, log_value, topic=topic, group=group)
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.events import HEAD_MAX, EventKind
from storage.records import MessageRecord, encode_message
from storage.txn import Txn

__all__ = ["EventKind", "emit", "emit_each", "emit_group_many", "emit_many", "emit_plain"]


def emit(
    txn: Txn,
    kind: EventKind,
    record: bytes,
    *,
    topic: str | None = None,
    group: str | None = None,
    attempt: int = 0,
) -> None:
    """Stage one event about the message whose encoded record (storage/records.py: a
    timer value, a log entry) is ``record``. ``topic`` when it is not the record's own (a
    %DLQ% receive); ``group`` and ``attempt`` (>= 1) for group events."""
    staged = txn.events
    if staged is None:
        return
    if group or topic or attempt:
        group_b, topic_b = group.encode() if group else b"", topic.encode() if topic else b""
        staged.add_group(kind, record, attempt, group_b, topic_b)
    else:  # Staged.add, inlined: this runs once per message sent
        staged.heads.append(record if len(record) <= HEAD_MAX else record[:HEAD_MAX])
        staged.kinds.append(kind)


def emit_many(txn: Txn, kind: EventKind, values: list[bytes]) -> None:
    """Stage one event per encoded record (a storm's span of moved timers: no Python loop)."""
    staged = txn.events
    if staged is not None:
        staged.add_many(kind, values)


def emit_each(txn: Txn, kinds: bytes | bytearray, values: list[bytes]) -> None:
    """``emit_many`` with a kind per encoded record (``kinds[i]`` for ``values[i]``)."""
    staged = txn.events
    if staged is not None:
        staged.add_each(kinds, values)


def emit_group_many(
    txn: Txn,
    kind: EventKind,
    records: Sequence[bytes],
    attempts: Sequence[int],
    *,
    topic: str,
    group: str,
) -> None:
    """``emit`` of one group event per record, with its attempt (a receive's or an ack's
    lot: one call per op, not per message)."""
    staged = txn.events
    if staged is not None and records:
        staged.add_group_many(kind, records, attempts, group.encode(), topic.encode())


def emit_plain(
    txn: Txn, kind: EventKind, topic: str, msg_id: str, deliver_at_ms: int, created_at_ms: int
) -> None:
    """An event from known fields, for a message whose record is no longer at hand."""
    if txn.events is not None:
        record = MessageRecord(topic, msg_id, deliver_at_ms, created_at_ms, b"")
        emit(txn, kind, encode_message(record))
