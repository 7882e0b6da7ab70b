"""Consumer-side ops (run on the writer thread): receive, ack, nack, change invisibility,
the timers that end invisibility and retry back-off, dead letters and redrive.

A group reads a topic through two lanes: its retry lane for that topic (messages visible
again after a failed attempt) and then the topic log itself, each from the group's cursor.
A received message gets an in-flight record and an invisibility timer (one for the lot a
receive part took: the ack or nack that ends its last hold deletes it, a stale one passes
by); a nacked one a retry timer. Both are ordinary timer keys, fired by the same scanner
and deliverer as scheduled messages: there is no second scheduling mechanism.

Per message and group: INFLIGHT (held, until deadline) → acked, or a failed attempt
(nack, or the invisibility ran out) → RETRYING (until the back-off ends) → READY (in the
retry lane) → INFLIGHT again …; after ``max_attempts`` failed attempts → DEAD (%DLQ%).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import orjson

from storage import keys
from storage.errors import MessageNotFound, ReceiptRejected
from storage.events import EventKind
from storage.records import (
    DeadLetter,
    GroupState,
    Inflight,
    MessageRecord,
    MessageState,
    decode_dead,
    decode_index,
    decode_inflight,
    decode_message,
    encode_dead,
    encode_inflight,
    encode_inflight_as,
    record_is_base64,
    record_tag,
    stamp_delivered,
)
from storage.store import CF, RocksStore
from storage.txn import Txn
from workers.ops import events, lanes, retention
from workers.rules import tagfilter
from workers.rules.receipts import (
    Receipt,
    decode_receipt,
    decode_receipts,
    encode_receipt,
    encode_receipts,
)
from workers.rules.retry import (
    GroupSettings,
    decode_settings,
    encode_settings,
    retry_delay_ms,
    stored_filter,
)
from workers.timers import hold, invisible, retry
from workers.timers.hold import GroupTimer
from workers.timers.kind import one_at_a_time

TimerKeyFn = Callable[[int, GroupTimer], bytes]  # a kind's timer_key (invisible or retry)


class Received(NamedTuple):
    record: MessageRecord
    attempt: int
    receipt: str


MAX_RECEIVE_BYTES = 8 * 1024 * 1024  # a receive reply's size, about (api.md, Edges)
_ITEM_OVERHEAD = 256  # the JSON around one message: names, times, receipt
# What JSON escapes in a record's text (body, tag; properties are stored as JSON already):
# every control character, '"' and '\\' take two bytes (\n, \", ...), and the control
# characters without a short escape six (\u0001): a body of those is six times its size.
_ESCAPED = bytes(range(0x20)) + b'"\\'
_ESCAPED_LONG = bytes(c for c in range(0x20) if c not in b"\b\t\n\f\r")


class Room:
    """What is left of a receive reply's byte budget; the first message always fits. One
    per reply: a receive taken in parts (Engine.receive) shares it across them.

    A UTF-8 body's escapes are counted only when they could matter: while even six bytes
    a byte (the longest escape) would fit, records are taken at their raw size and kept
    aside; their escapes are counted (two C passes each) once the budget gets close."""

    def __init__(self, max_bytes: int) -> None:
        self.left = max_bytes  # the records kept aside counted at their raw size
        self.taken = 0
        self.full = False  # it refused a record: more may be visible than it took
        # The last receive read every message visible to its group (see receive): a
        # receiver that comes back before its topic is woken again would find nothing.
        self.drained = False
        self._unsized: list[bytes] = []  # taken UTF-8 records, escapes not counted yet
        self._slack = 0  # the most those escapes can add

    def fits(self, record: bytes | None) -> bool:
        return self.take([record]) == 1

    def take(self, records: Sequence[bytes | None]) -> int:
        """How many of ``records``, from the first, fit in what is left (taking them)."""
        raw, most = 0, 0
        for record in records:
            if record is not None:
                size = len(record) + _ITEM_OVERHEAD
                if record_is_base64(record):
                    size = size * 4 // 3
                    raw, most = raw + size, most + size
                else:
                    raw, most = raw + size, most + size + _ESCAPE_MAX * len(record)
        if most + self._slack <= self.left:  # all fit, whatever their escapes
            self.left -= raw
            self._slack += most - raw
            self._unsized += [r for r in records if r is not None and not record_is_base64(r)]
            self.taken += len(records)
            return len(records)
        self._settle()
        left, taken, n = self.left, self.taken, 0
        for record in records:
            size = _reply_bytes(record)
            if taken and size > left:
                break
            left -= size
            taken += 1
            n += 1
        self.left, self.taken = left, taken
        self.full = self.full or n < len(records)
        return n

    def _settle(self) -> None:
        """Count the escapes of the records kept aside."""
        for record in self._unsized:
            self.left -= _escapes(record)
        self._unsized, self._slack = [], 0


_ESCAPE_MAX = 5  # the most bytes one byte of text grows by in JSON (\u0001)


def _escapes(record: bytes) -> int:
    """The bytes JSON's escapes add to a UTF-8 record's text: one each, four more for the
    long ones; two C passes (~1 ns a byte; the header's few control bytes count too, a
    bound within _ITEM_OVERHEAD's own slack)."""
    escaped = len(record) - len(record.translate(None, _ESCAPED))
    if not escaped:
        return 0
    return escaped + 4 * (len(record) - len(record.translate(None, _ESCAPED_LONG)))


def _reply_bytes(record: bytes | None) -> int:
    """What a stored record takes in a receive reply, escapes included: a base64 body grows
    by 4/3, a UTF-8 one by what JSON escapes in it."""
    if record is None:
        return 0
    size = len(record) + _ITEM_OVERHEAD
    if record_is_base64(record):
        return size * 4 // 3
    return size + _escapes(record)


def receive(
    txn: Txn,
    topic: str,
    group: str,
    limit: int,
    invisible_ms: int,
    room: Room | None = None,
) -> list[Received]:
    """Hold up to ``limit`` visible messages for ``invisible_ms``: redeliveries first.
    Stops adding messages when ``room`` (a reply's byte budget, MAX_RECEIVE_BYTES if not
    given) is full, after at least one. With a
    tag filter, messages it does not match are passed over (state ``filtered``)."""
    out: list[Received] = []
    room = room or Room(MAX_RECEIVE_BYTES)
    topic_lane = keys.topic_lane(topic)

    def logged(ref: bytes) -> bytes | None:
        return txn.get(CF.LOGS, keys.log_key(topic_lane, keys.read_u64(ref)))

    retries = lanes.read(
        txn,
        keys.retry_lane(topic, group),
        group,
        limit,
        lambda refs: room.take([logged(ref) for ref in refs]),
    )
    dead_of = topic[len(keys.DLQ_PREFIX) :] if topic.startswith(keys.DLQ_PREFIX) else None

    def gone(record: MessageRecord) -> bool:
        """A dead letter redriven since: no longer one (nor listed, nor redrivable)."""
        return dead_of is not None and not _still_dead(txn, dead_of, record)

    for _, ref in retries:
        seq = keys.read_u64(ref)
        raw = txn.get(CF.INFLIGHT, keys.inflight_key(topic, group, seq))
        value = logged(ref)
        if raw is None or value is None:
            continue  # its retention ended meanwhile
        state, record = decode_inflight(raw), decode_message(value)
        if state.state is GroupState.READY and not gone(record):
            out.append(_hold(txn, topic, group, seq, record, value, state, invisible_ms))
    wanted = tagfilter.tags(group_filter(txn, topic, group))
    fresh_limit = limit - len(out)
    if wanted is None:
        entries = lanes.read(txn, topic_lane, group, fresh_limit, room.take, join=True)
    else:
        entries = tagfilter.read(txn, topic, group, wanted, fresh_limit, room.fits)
    # Drained: both lanes read short of what was asked, nothing refused for room, and no
    # entry read was passed over (a tag filter's or a redriven dead letter's): whatever
    # else the group could receive comes from a later batch that wakes the topic.
    room.drained = (
        wanted is None
        and dead_of is None
        and len(retries) < limit
        and len(entries) < fresh_limit
        and not room.full
    )
    fresh = [(keys.log_seq(key), value) for key, value in entries]
    if dead_of is not None:
        fresh = [(seq, value) for seq, value in fresh if not gone(decode_message(value))]
    out += _hold_fresh(txn, topic, group, fresh, invisible_ms)
    if out:
        txn.count_group(topic, group, inflight=len(out))  # once per op, not per message
    return out


def _still_dead(txn: Txn, group: str, letter: MessageRecord) -> bool:
    seq = retention.dead_seq(txn, group, letter.topic, letter.msg_id, letter.delivered_at_ms)
    return seq is not None


def _secret(txn: Txn) -> bytes:
    return txn.store.secret(keys.RECEIPT_SECRET_KEY)


def _deadline(txn: Txn, invisible_ms: int) -> int:
    """The end of an invisibility: always after this batch's ``now``. A timer key due at
    ``now`` could land behind the scanner's cursor and never fire, or inside a span being
    moved and be range-deleted with it (Writer.scan_horizon)."""
    return txn.now_ms + max(invisible_ms, 1)


def _hold(
    txn: Txn,
    topic: str,
    group: str,
    seq: int,
    record: MessageRecord,
    value: bytes,
    prev: Inflight | None,
    invisible_ms: int,
) -> Received:
    attempt = (prev.attempts if prev else 0) + 1
    # A first hold's generation is the time: a lane's seqs start again at 0 once retention
    # emptied it, and a receipt (or a timer) of a message that had the same seq before
    # then must not match the new one.
    generation = prev.generation + 1 if prev else txn.now_ms
    held = Inflight(
        GroupState.INFLIGHT,
        attempt,
        generation,
        _deadline(txn, invisible_ms),
        prev.last_failure_ms if prev else 0,
    )
    txn.put(CF.INFLIGHT, keys.inflight_key(topic, group, seq), encode_inflight(held))
    _put_timer(txn, invisible.timer_key, topic, group, seq, held)
    events.emit(txn, EventKind.RECEIVED, value, topic=topic, group=group, attempt=attempt)
    return Received(record, attempt, encode_receipt(_secret(txn), topic, group, seq, generation))


def _hold_fresh(
    txn: Txn, topic: str, group: str, logged: list[tuple[int, bytes]], invisible_ms: int
) -> list[Received]:
    """``_hold`` of log entries (seq, encoded record) the group never held before, all at
    once: their first holds share one in-flight record (attempt 1, generation and
    deadline of this batch), and their keys, events and receipts are made per op, not a
    call per message (the consumer path's cost is per message)."""
    if not logged:
        return []
    generation, deadline = txn.now_ms, _deadline(txn, invisible_ms)
    held = encode_inflight(Inflight(GroupState.INFLIGHT, 1, generation, deadline))
    slot, u64 = keys.inflight_prefix(topic, group), keys.u64
    seqs = [seq for seq, _ in logged]
    txn.put_many(CF.INFLIGHT, [(slot + u64(seq), held) for seq in seqs])
    # One invisibility timer for the lot: an ack or nack leaves it (invisible.py)
    lot = invisible.timer_key(deadline, GroupTimer(topic, group, seqs[0], generation))
    txn.put(CF.TIMERS, lot, hold.lot_value(seqs[1:]))
    txn.schedule_hint(deadline)
    values = [value for _, value in logged]
    events.emit_group_many(
        txn, EventKind.RECEIVED, values, [1] * len(values), topic=topic, group=group
    )
    receipts = encode_receipts(_secret(txn), topic, group, [(seq, generation) for seq in seqs])
    return [  # tuple.__new__: a NamedTuple's own __new__ costs half as much again
        tuple.__new__(Received, (decode_message(value), 1, receipt))
        for value, receipt in zip(values, receipts, strict=True)
    ]


def _put_timer(
    txn: Txn, timer_key: TimerKeyFn, topic: str, group: str, seq: int, held: Inflight
) -> None:
    key = timer_key(held.deadline_ms, GroupTimer(topic, group, seq, held.generation))
    txn.put(CF.TIMERS, key, b"")
    txn.schedule_hint(held.deadline_ms)


MAX_TIMER_LOOKUPS = 8  # lots an ack or nack looks up to delete their timers (the rest pass by)
ACKED = "acked"
EXPIRED = "expired"
UNKNOWN = "unknown"


def ack(txn: Txn, topic: str, group: str, receipts: list[str]) -> list[str]:
    """Per receipt: ``acked`` (also when acked before), ``expired`` or ``unknown``."""
    decoded = _decoded(txn, topic, group, receipts)
    holds = _holds(txn, topic, group, decoded)
    out: list[str] = []
    acked: list[tuple[int, Inflight, bytes]] = []  # seq, hold and new record of each acked now
    for receipt in decoded:
        found = _check(txn, topic, group, receipt, holds)
        if isinstance(found, str):
            out.append(found)
            continue
        seq, held = found
        done = encode_inflight_as(held, GroupState.ACKED)
        holds[seq] = done  # what a second receipt for it in this op reads (staged below)
        acked.append((seq, held, done))
        out.append(ACKED)
    if acked:  # the writes, counts and events once per op, not a call per message
        slot, u64 = keys.inflight_prefix(topic, group), keys.u64
        txn.put_many(CF.INFLIGHT, [(slot + u64(seq), done) for seq, _, done in acked])
        attempts = [(seq, held.attempts) for seq, held, _ in acked]
        emit_events(txn, EventKind.ACKED, topic, group, attempts)
        txn.count_group(topic, group, inflight=-len(acked))
        txn.note("acks", len(acked))
        _drop_spent_timers(txn, topic, group, acked)
    txn.sync = True
    return out


def nack(txn: Txn, topic: str, group: str, receipts: list[str], delay_ms: int | None) -> list[str]:
    """The attempts failed: each message comes back after the group's retry delay (or
    ``delay_ms``), or goes to the dead-letter queue after ``max_attempts``. Per receipt:
    ``nacked``, ``expired`` or ``unknown``."""
    settings = group_settings(txn, topic, group)
    decoded = _decoded(txn, topic, group, receipts)
    holds = _holds(txn, topic, group, decoded)
    # Each nacked event's record, read with one multi-get up front (a nack changes no log
    # entry): a point read per message was a sixth of an ack's cost.
    seqs = [d.seq for d in decoded if d is not None]
    logged = _logged(txn, topic, seqs)
    past = _past_retention(txn, topic, seqs)
    out: list[str] = []
    nacked: list[tuple[int, Inflight, int]] = []  # seq, hold and retry delay of each
    for receipt in decoded:
        found = _check(txn, topic, group, receipt, holds)
        if isinstance(found, str):
            out.append(EXPIRED if found == ACKED else found)
            continue
        seq, held = found
        out.append("nacked")
        delay = delay_ms if delay_ms is not None else retry_delay_ms(settings.retry, held.attempts)
        nacked.append((seq, held, delay))
        # What a second receipt for it in this op reads: gone, or no longer held.
        holds[seq] = None if seq in past else encode_inflight_as(held, GroupState.RETRYING)
    if nacked:
        _fail_lot(txn, topic, group, nacked, past, logged, settings)
        _drop_spent_timers(txn, topic, group, nacked)
    txn.sync = True
    return out


def _drop_spent_timers(
    txn: Txn, topic: str, group: str, settled: Sequence[tuple[int, Inflight, object]]
) -> None:
    """Delete the invisibility timers this op left with nothing to do: at its end a timer
    fails only what is still held with its generation, and this ack or nack has just ended
    those holds. Left in place, each would still be scanned, moved and read back at its
    deadline: on a steady consumer as many moves again as receives, ``invisible_ms`` later
    (a pusher's acks come in pieces of its lots). The lot holding a settled
    seq is the timer at or before that seq's key (one backward seek); it goes once none of
    its lot is held with its generation any more."""
    lots: dict[tuple[int, int], list[int]] = {}  # usually one: (part of) a receive's lot
    for seq, held, _ in settled:
        lots.setdefault((held.deadline_ms, held.generation), []).append(seq)
    looked = 0
    for (deadline, generation), seqs in lots.items():
        left = sorted(seqs)
        while left and looked < MAX_TIMER_LOOKUPS:
            looked += 1
            timer = _timer_of(txn, deadline, GroupTimer(topic, group, left[0], generation))
            if timer is None:
                left = left[1:]  # its timer fired, or an op deleted it already
                continue
            key, found, lot = timer
            left = [seq for seq in left if seq not in lot]
            rest = sorted(lot.difference(seqs))
            held_still = current_holds(txn, found, rest) if rest else []
            if not any(h.state is GroupState.INFLIGHT for _, h in held_still):
                txn.delete(CF.TIMERS, key)


def _timer_of(
    txn: Txn, deadline: int, held: GroupTimer
) -> tuple[bytes, GroupTimer, set[int]] | None:
    """The invisibility timer whose lot holds ``held``'s seq with its generation: its key,
    what it decodes to and its lot's seqs; None if there is none (it fired, or was
    deleted)."""
    at = invisible.timer_key(deadline, held)
    value = txn.get(CF.TIMERS, at)
    if value is not None:  # the lot starts at this seq: a point read, the usual case
        return at, held, set(hold.lot_seqs(held, value))
    # The store's keys only: a lot's timer is put by its receive's batch, which an ack of
    # the lot (it needs the receipts) never shares; a delete staged here shows in txn.get.
    floor = at[: -hold.SEQ_GEN_BYTES]  # the timers of this deadline, topic and group
    key = txn.store.last_key(CF.TIMERS, floor, at)
    value = txn.get(CF.TIMERS, key) if key is not None else None
    if key is None or value is None:
        return None
    found = invisible.decode(key)
    lot = set(hold.lot_seqs(found, value))
    if found.generation != held.generation or held.seq not in lot:
        return None
    return key, found, lot


def _fail_lot(
    txn: Txn,
    topic: str,
    group: str,
    nacked: list[tuple[int, Inflight, int]],
    past: set[int],
    logged: dict[int, bytes],
    settings: GroupSettings,
) -> None:
    """``fail`` of each ``(seq, hold, delay)`` a nack took, after its nacked event. The
    usual way (a retry timer each) is staged once for the lot; past retention, dead after
    ``max_attempts`` or ready at once, one by one as ``fail`` does."""
    now, slot, u64 = txn.now_ms, keys.inflight_prefix(topic, group), keys.u64
    lot = [(seq, held.attempts) for seq, held, _ in nacked]
    _emit_logged(txn, EventKind.NACKED, logged, topic, group, lot)
    usual = []  # seq and retrying state of each nacked the usual way
    for seq, held, delay in nacked:
        if seq in past or held.attempts >= settings.max_attempts or delay <= 0:
            fail(txn, topic, group, seq, held, delay, settings)
        else:
            state = (GroupState.RETRYING, held.attempts, held.generation, now + delay, now)
            usual.append((seq, tuple.__new__(Inflight, state)))  # not _replace: per message
    if usual:
        txn.put_many(CF.INFLIGHT, [(slot + u64(seq), encode_inflight(w)) for seq, w in usual])
        backs = [(w.deadline_ms, seq, w.generation) for seq, w in usual]
        txn.put_many(CF.TIMERS, [(key, b"") for key in retry.timer_keys(topic, group, backs)])
        txn.schedule_hint(min(due for due, _, _ in backs))
        txn.count_group(topic, group, inflight=-len(usual), retrying=len(usual))
    txn.note("nacks", len(nacked))


def _past_retention(txn: Txn, topic: str, seqs: Sequence[int]) -> set[int]:
    """Which of these seqs of ``topic``'s log are past retention, still held by a group
    (retention.py): a failed attempt there ends the group's hold (``fail``)."""
    held = txn.get_seqs(CF.META, keys.held_prefix(keys.topic_lane(topic)), seqs)
    return {seq for seq, mark in zip(seqs, held, strict=True) if mark is not None}


def change_invisibility(txn: Txn, topic: str, group: str, receipt: str, invisible_ms: int) -> str:
    """Hold the message for ``invisible_ms`` from now; returns the new receipt (the old
    one stops working), as RocketMQ's changeInvisibleDuration."""
    found = _held(txn, topic, group, receipt)
    if isinstance(found, str):
        if found == UNKNOWN:
            raise MessageNotFound("no message held by this receipt in this topic and group")
        raise ReceiptRejected(f"the receipt is {found}: the message is no longer held by it")
    seq, held = found
    renewed = held._replace(
        generation=held.generation + 1, deadline_ms=_deadline(txn, invisible_ms)
    )
    txn.put(CF.INFLIGHT, keys.inflight_key(topic, group, seq), encode_inflight(renewed))
    _put_timer(txn, invisible.timer_key, topic, group, seq, renewed)
    txn.sync = True
    return encode_receipt(_secret(txn), topic, group, seq, renewed.generation)


def _held(txn: Txn, topic: str, group: str, receipt: str) -> tuple[int, Inflight] | str:
    """The in-flight record a receipt still controls, or the status to answer instead."""
    return _check(txn, topic, group, decode_receipt(_secret(txn), receipt, topic, group))


def _decoded(txn: Txn, topic: str, group: str, receipts: list[str]) -> list[Receipt | None]:
    return decode_receipts(_secret(txn), receipts, topic, group)


def _holds(
    txn: Txn, topic: str, group: str, decoded: list[Receipt | None]
) -> dict[int, bytes | None]:
    """The in-flight records of these receipts, read at once before an op changes any (a
    point read each was ~1 µs of an ack's ~20)."""
    seqs = [d.seq for d in decoded if d is not None]
    slot = keys.inflight_prefix(topic, group)
    return dict(zip(seqs, txn.get_seqs(CF.INFLIGHT, slot, seqs), strict=True))


def _check(
    txn: Txn,
    topic: str,
    group: str,
    decoded: Receipt | None,
    holds: dict[int, bytes | None] | None = None,
) -> tuple[int, Inflight] | str:
    """``_held`` for a receipt already decoded (None: not one of this topic and group).
    ``holds``: records read by ``_holds`` before the op changed any; each is used once, so
    a receipt given twice in one op reads what the first one wrote."""
    if decoded is None:
        return UNKNOWN
    raw: bytes | None
    if holds is not None and decoded.seq in holds:
        raw = holds.pop(decoded.seq)
    else:
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


def fail(
    txn: Txn,
    topic: str,
    group: str,
    seq: int,
    held: Inflight,
    delay_ms: int,
    settings: GroupSettings,
) -> None:
    """A held message's attempt failed: dead after max_attempts, else visible again after
    ``delay_ms``."""
    now = txn.now_ms
    txn.count_group(topic, group, inflight=-1)
    slot = keys.inflight_key(topic, group, seq)
    if txn.get(CF.META, keys.held_key(keys.topic_lane(topic), seq)) is not None:
        txn.delete(CF.INFLIGHT, slot)  # past its retention: gone for the group (retention.py)
        return
    if held.attempts >= settings.max_attempts:
        _bury(txn, topic, group, seq, held)
        return
    if delay_ms <= 0:  # due now: never a timer key (see Writer.scan_horizon)
        make_ready(txn, topic, group, seq, held._replace(last_failure_ms=now))
        return
    waiting = held._replace(
        state=GroupState.RETRYING, deadline_ms=now + delay_ms, last_failure_ms=now
    )
    txn.put(CF.INFLIGHT, slot, encode_inflight(waiting))
    _put_timer(txn, retry.timer_key, topic, group, seq, waiting)
    txn.count_group(topic, group, retrying=1)


def make_ready(txn: Txn, topic: str, group: str, seq: int, held: Inflight) -> None:
    ready = held._replace(state=GroupState.READY, deadline_ms=txn.now_ms)
    txn.put(CF.INFLIGHT, keys.inflight_key(topic, group, seq), encode_inflight(ready))
    lanes.append(txn, keys.retry_lane(topic, group), keys.u64(seq))
    txn.woken_topics.add(topic)


def _bury(txn: Txn, topic: str, group: str, seq: int, held: Inflight) -> None:
    """Move the message to %DLQ%group, keeping its source topic, attempts, last failure;
    its delivered_at there is when it went dead (the DLQ's retention counts from it)."""
    now = txn.now_ms
    raw = txn.get(CF.LOGS, keys.log_key(keys.topic_lane(topic), seq))
    slot = keys.inflight_key(topic, group, seq)
    if raw is None:  # gone past retention: nothing left to keep
        txn.delete(CF.INFLIGHT, slot)
        return
    dead = held._replace(state=GroupState.DEAD, deadline_ms=now, last_failure_ms=now)
    txn.put(CF.INFLIGHT, slot, encode_inflight(dead))
    txn.note("dead_letters")
    record = decode_message(raw)
    dead_value = stamp_delivered(raw, now)
    dlq_seq = lanes.append(txn, keys.dlq_lane(group), dead_value)
    tagfilter.index(txn, keys.DLQ_PREFIX + group, dead_value, dlq_seq)
    events.emit(txn, EventKind.DEAD, raw, topic=topic, group=group, attempt=held.attempts)
    letter = DeadLetter(record.msg_id, held.attempts, now, now)
    txn.put(CF.DEAD, keys.dead_key(topic, group, now, seq), encode_dead(letter))
    txn.count_group(topic, group, dead=1)
    txn.count_topic(keys.DLQ_PREFIX + group, delivered=1)
    txn.woken_topics.add(keys.DLQ_PREFIX + group)


def emit_event(txn: Txn, kind: EventKind, topic: str, group: str, seq: int, attempt: int) -> None:
    """A group event about the message at ``seq`` of ``topic``'s log."""
    emit_events(txn, kind, topic, group, [(seq, attempt)])


def emit_events(
    txn: Txn, kind: EventKind, topic: str, group: str, held: Sequence[tuple[int, int]]
) -> None:
    """Group events about the messages at these ``(seq, attempt)`` of ``topic``'s log,
    their records read with one multi-get (a read per acked message was a sixth of an
    ack's cost), and not at all with the event log off."""
    _emit_logged(txn, kind, _logged(txn, topic, [seq for seq, _ in held]), topic, group, held)


def _emit_logged(
    txn: Txn,
    kind: EventKind,
    logged: dict[int, bytes],
    topic: str,
    group: str,
    held: Sequence[tuple[int, int]],
) -> None:
    """The group events about these ``(seq, attempt)``, from their records read by
    ``_logged`` (none: the event log is off, or swept past retention, never held)."""
    found = [(logged[seq], attempt) for seq, attempt in held if seq in logged]
    records, attempts = [r for r, _ in found], [a for _, a in found]
    events.emit_group_many(txn, kind, records, attempts, topic=topic, group=group)


def _logged(txn: Txn, topic: str, seqs: Sequence[int]) -> dict[int, bytes]:
    """The log records at these seqs of ``topic`` that events need (none with the event
    log off), read at once."""
    if txn.events is None or not seqs:
        return {}
    records = txn.get_seqs(CF.LOGS, keys.topic_lane(topic), seqs)
    return {seq: r for seq, r in zip(seqs, records, strict=True) if r is not None}


def current_holds(txn: Txn, timer: GroupTimer, seqs: list[int]) -> list[tuple[int, Inflight]]:
    """The holds a group timer is about (its seq, or its lot's seqs, read at once) that it
    is not stale for: not acked, nacked or re-held since it was set (the generation moved
    on)."""
    slot = keys.inflight_prefix(timer.topic, timer.group)
    raws = txn.get_seqs(CF.INFLIGHT, slot, seqs)
    held = [(seq, decode_inflight(raw)) for seq, raw in zip(seqs, raws, strict=True) if raw]
    return [(seq, h) for seq, h in held if h.generation == timer.generation]


def redrive(txn: Txn, topic: str, group: str, msg_id: str) -> None:
    """Put a dead letter back into the group's flow on ``topic``, attempts reset."""
    seq, held = _dead(txn.get, topic, group, msg_id)
    letter = keys.dead_key(topic, group, held.deadline_ms, seq)
    if txn.get(CF.DEAD, letter) is not None:
        txn.delete(CF.DEAD, letter)
        txn.count_group(topic, group, dead=-1)
    emit_event(txn, EventKind.REDRIVEN, topic, group, seq, held.attempts)
    txn.note("redrives")
    fresh = held._replace(attempts=0, generation=held.generation + 1)
    make_ready(txn, topic, group, seq, fresh)
    txn.sync = True


def _dead(
    get: Callable[[str, bytes], bytes | None], topic: str, group: str, msg_id: str
) -> tuple[int, Inflight]:
    """The log seq and group record of a dead letter (``get`` reads a Txn or the store)."""
    seq = _delivered_seq(get(CF.MESSAGES, keys.message_key(topic, msg_id)))
    raw = get(CF.INFLIGHT, keys.inflight_key(topic, group, seq)) if seq is not None else None
    held = decode_inflight(raw) if raw is not None else None
    if seq is None or held is None or held.state is not GroupState.DEAD:
        raise MessageNotFound(f"{msg_id!r} from topic {topic!r} is not a dead letter of {group!r}")
    return seq, held


def _delivered_seq(raw: bytes | None) -> int | None:
    if raw is None:
        return None
    entry = decode_index(raw)
    return entry.seq if entry.state is MessageState.DELIVERED else None


# --- group settings ----------------------------------------------------------------------


def group_settings(txn: Txn, topic: str, group: str) -> GroupSettings:
    return decode_settings(txn.get(CF.META, keys.group_key(topic, group)), f"{topic}/{group}")


def group_filter(txn: Txn, topic: str, group: str) -> str:
    """The group's tag filter, parsed once per distinct settings record (a receive reads
    it every time; validating the whole settings model each time cost more than the read)."""
    return stored_filter(txn.get(CF.META, keys.group_key(topic, group)))


FILTER_HISTORY = 64  # earlier filters remembered per group (to name what they passed over)


def put_group_settings(txn: Txn, topic: str, group: str, settings: GroupSettings) -> None:
    old = group_settings(txn, topic, group)
    if old.filter != settings.filter:  # what the old filter passed over stays filtered
        cursor = txn.get(CF.META, keys.cursor_key(keys.topic_lane(topic), group))
        slot = keys.filter_history_key(topic, group)
        raw = txn.get(CF.META, slot)
        history = orjson.loads(raw) if raw else []
        history.append([keys.read_u64(cursor) if cursor else 0, old.filter])
        txn.put(CF.META, slot, orjson.dumps(history[-FILTER_HISTORY:]))
    txn.put(CF.META, keys.group_key(topic, group), encode_settings(settings))
    txn.sync = True


# --- read-only views (no writer needed) ----------------------------------------------------


class GroupView(NamedTuple):
    state: str
    attempts: int
    next_visible_ms: int | None
    last_failure_ms: int | None


_STATE_NAMES = {
    GroupState.INFLIGHT: "inflight",
    GroupState.READY: "pending",
    GroupState.RETRYING: "retrying",
    GroupState.ACKED: "acked",
    GroupState.DEAD: "dead",
}


_TIMED = (GroupState.INFLIGHT, GroupState.RETRYING, GroupState.READY)  # deadline = next visible


def _passed_over(store: RocksStore, topic: str, group: str, seq: int) -> bool:
    """Whether the filter in force when the group's cursor passed the logged message did
    not take it (retention keeps no record of what it swept: that is not filtered)."""
    record = store.get(CF.LOGS, keys.log_key(keys.topic_lane(topic), seq))
    if record is None:
        return False
    expression = stored_filter(store.get(CF.META, keys.group_key(topic, group)))
    raw = store.get(CF.META, keys.filter_history_key(topic, group))
    for ended_at, earlier in orjson.loads(raw) if raw else []:
        if seq < ended_at:  # the cursor passed it while this earlier filter was set
            expression = earlier
            break
    wanted = tagfilter.tags(expression)
    return wanted is not None and record_tag(record) not in wanted


def group_view(store: RocksStore, topic: str, group: str, msg_id: str) -> GroupView:
    """The message as ``group`` sees it; MessageNotFound if the group never saw it."""
    seq = _delivered_seq(store.get(CF.MESSAGES, keys.message_key(topic, msg_id)))
    cursor = store.get(CF.META, keys.cursor_key(keys.topic_lane(topic), group))
    known = cursor is not None or store.get(CF.META, keys.group_key(topic, group)) is not None
    if seq is None or not known:
        raise MessageNotFound(f"group {group!r} has not seen {msg_id!r} in topic {topic!r}")
    raw = store.get(CF.INFLIGHT, keys.inflight_key(topic, group, seq))
    if raw is None:
        if cursor is not None and keys.read_u64(cursor) > seq:
            # Passed by the group's cursor with no record: its filter passed it over, or
            # retention took the group's record (then it is no longer the group's).
            if _passed_over(store, topic, group, seq):
                return GroupView("filtered", 0, None, None)
            raise MessageNotFound(f"group {group!r} no longer holds a record of {msg_id!r}")
        return GroupView("pending", 0, None, None)
    held = decode_inflight(raw)
    visible = held.deadline_ms if held.state in _TIMED else None
    return GroupView(_STATE_NAMES[held.state], held.attempts, visible, held.last_failure_ms or None)


def dead_letter(store: RocksStore, topic: str, group: str, msg_id: str) -> DeadLetter:
    """One dead letter of ``group`` from ``topic``; MessageNotFound unless it is one."""
    _, held = _dead(store.get, topic, group, msg_id)
    return DeadLetter(msg_id, held.attempts, held.last_failure_ms, held.deadline_ms)


def dead_letters(
    store: RocksStore, topic: str, group: str, after: bytes | None, limit: int
) -> tuple[list[tuple[bytes, DeadLetter]], bool]:
    """Up to ``limit`` dead letters from ``topic``, oldest first, after key ``after``;
    and whether more follow."""
    prefix = keys.dead_prefix(topic, group)
    start = keys.successor(after) if after else prefix
    if not start.startswith(prefix):
        start = prefix
    found = store.scan(CF.DEAD, start, keys.prefix_end(prefix), limit + 1)
    return [(k, decode_dead(v)) for k, v in found[:limit]], len(found) > limit


# --- the fire actions of the group timers (their key codecs: timers/invisible.py, retry.py)


def end_invisibility(txn: Txn, key: bytes, value: bytes) -> None:
    """An invisibility timer is due: each message of it still held fails an attempt (an
    expiry) and is visible again at once."""
    timer = invisible.decode(key)
    settings = None
    for seq, held in current_holds(txn, timer, hold.lot_seqs(timer, value)):
        if held.state is GroupState.INFLIGHT:
            emit_event(txn, EventKind.EXPIRED, timer.topic, timer.group, seq, held.attempts)
            settings = settings or group_settings(txn, timer.topic, timer.group)
            fail(txn, timer.topic, timer.group, seq, held, 0, settings)
            txn.note("expiries")


def end_retry_wait(txn: Txn, key: bytes, value: bytes) -> None:
    """A retry back-off is over: the message goes into the group's retry lane."""
    timer = hold.decode(retry.PREFIX, key)
    for seq, held in current_holds(txn, timer, [timer.seq]):
        if held.state is GroupState.RETRYING:
            txn.count_group(timer.topic, timer.group, retrying=-1)
            make_ready(txn, timer.topic, timer.group, seq, held)


end_invisibility_run = one_at_a_time(end_invisibility)
end_retry_wait_run = one_at_a_time(end_retry_wait)
