"""Consumer-side ops (run on the writer thread): receive, ack, and the end of invisibility.

A group reads a topic through two lanes: its retry lane for that topic (messages visible
again after a failed attempt) and then the topic log itself, each from the group's cursor.
A received message gets an in-flight record and an invisibility timer — an ordinary timer
key, fired by the same scanner and deliverer as scheduled messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage import keys
from storage.records import (
    GroupState,
    Inflight,
    MessageRecord,
    TimerKind,
    decode_inflight,
    decode_message,
    encode_inflight,
    timer_value,
)
from storage.store import CF
from workers import lanes
from workers.receipts import decode_receipt, encode_receipt
from workers.txn import Txn


@dataclass(frozen=True, slots=True)
class Received:
    record: MessageRecord
    attempt: int
    receipt: str


def receive(txn: Txn, topic: str, group: str, limit: int, invisible_ms: int) -> list[Received]:
    """Hold up to ``limit`` visible messages for ``invisible_ms``: redeliveries first."""
    out: list[Received] = []
    topic_lane = keys.topic_lane(topic)
    for _, value in lanes.read(txn, keys.retry_lane(topic, group), group, limit):
        seq = keys.read_u64(value)
        raw = txn.get(CF.INFLIGHT, keys.inflight_key(topic, group, seq))
        record = txn.get(CF.LOGS, keys.log_key(topic_lane, seq))
        if raw is None or record is None:
            continue  # swept past retention
        state = decode_inflight(raw)
        if state.state is GroupState.READY:
            out.append(_hold(txn, topic, group, seq, decode_message(record), state, invisible_ms))
    for key, value in lanes.read(txn, topic_lane, group, limit - len(out)):
        seq = keys.log_seq(key)
        out.append(_hold(txn, topic, group, seq, decode_message(value), None, invisible_ms))
    return out


def _hold(
    txn: Txn,
    topic: str,
    group: str,
    seq: int,
    record: MessageRecord,
    prev: Inflight | None,
    invisible_ms: int,
) -> Received:
    attempt = (prev.attempts if prev else 0) + 1
    generation = (prev.generation if prev else 0) + 1
    # A timer key must fall due after this batch's `now` (Writer.scan_horizon): one due now
    # could land behind the scanner's cursor and never fire, or inside a span being moved.
    deadline = txn.now_ms + max(invisible_ms, 1)
    held = Inflight(
        GroupState.INFLIGHT, attempt, generation, deadline, prev.last_failure_ms if prev else 0
    )
    txn.put(CF.INFLIGHT, keys.inflight_key(topic, group, seq), encode_inflight(held))
    _put_invisibility(txn, topic, group, seq, held)
    return Received(record, attempt, encode_receipt(topic, group, seq, generation))


def _put_invisibility(txn: Txn, topic: str, group: str, seq: int, held: Inflight) -> None:
    key = keys.invisible_timer_key(held.deadline_ms, topic, group, seq, held.generation)
    txn.put(CF.TIMERS, key, timer_value(TimerKind.INVISIBLE))
    txn.schedule_hint(held.deadline_ms)


def _drop_invisibility(txn: Txn, topic: str, group: str, seq: int, held: Inflight) -> None:
    key = keys.invisible_timer_key(held.deadline_ms, topic, group, seq, held.generation)
    txn.delete(CF.TIMERS, key)


ACKED = "acked"
EXPIRED = "expired"
UNKNOWN = "unknown"


def ack(txn: Txn, topic: str, group: str, receipts: list[str]) -> list[str]:
    """Per receipt: ``acked`` (also when acked before), ``expired`` or ``unknown``."""
    out: list[str] = []
    for receipt in receipts:
        found = _held(txn, topic, group, receipt)
        if isinstance(found, str):
            out.append(found)
            continue
        seq, held = found
        _drop_invisibility(txn, topic, group, seq, held)
        acked = held._replace(state=GroupState.ACKED)
        txn.put(CF.INFLIGHT, keys.inflight_key(topic, group, seq), encode_inflight(acked))
        out.append(ACKED)
    txn.sync = True
    return out


def _held(txn: Txn, topic: str, group: str, receipt: str) -> tuple[int, Inflight] | str:
    """The in-flight record a receipt still controls, or the status to answer instead."""
    decoded = decode_receipt(receipt, topic, group)
    if decoded is None:
        return UNKNOWN
    raw = txn.get(CF.INFLIGHT, keys.inflight_key(topic, group, decoded.seq))
    if raw is None:
        return UNKNOWN
    held = decode_inflight(raw)
    if held.generation != decoded.generation:
        return EXPIRED if held.generation > decoded.generation else UNKNOWN
    if held.state is GroupState.ACKED:
        return ACKED
    if held.state is not GroupState.INFLIGHT or held.deadline_ms <= txn.now_ms:
        return EXPIRED
    return decoded.seq, held


def expire(txn: Txn, timer: keys.InvisibleIdent) -> None:
    """An invisibility ran out: a failed attempt; the message is visible again at once."""
    slot = keys.inflight_key(timer.topic, timer.group, timer.seq)
    raw = txn.get(CF.INFLIGHT, slot)
    if raw is None:
        return
    held = decode_inflight(raw)
    if held.state is not GroupState.INFLIGHT or held.generation != timer.generation:
        return  # acked or re-held since: a stale timer
    ready = held._replace(state=GroupState.READY, last_failure_ms=txn.now_ms)
    txn.put(CF.INFLIGHT, slot, encode_inflight(ready))
    lanes.append(txn, keys.retry_lane(timer.topic, timer.group), keys.u64(timer.seq))
    txn.woken_topics.add(timer.topic)
