"""Producer-side ops (run on the writer thread): send, cancel, deliver, and the firing of
message timers that fall due (``fire_run``). Plus the read-only status lookup (runs
anywhere). A scheduled message is a timer key: workers/timers/message.py."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import NamedTuple, cast

from storage import keys
from storage.errors import CorruptRecordError, MessageConflict, MessageNotFound
from storage.events import EventKind
from storage.records import (
    CREATED_AT_OFFSET,
    DELIVERED_AT_SLICE,
    FLAGS_AT,
    INDEX,
    TAG_FLAG,
    IndexEntry,
    MessageRecord,
    MessageState,
    decode_index,
    decode_message,
    encode_index,
    encode_message,
)
from storage.store import CF, RocksStore
from storage.txn import Txn
from workers.ops import events, lanes
from workers.rules import tagfilter
from workers.timers import message
from workers.timers.kind import Span

_SCHEDULED = int(MessageState.SCHEDULED)
_SCHEDULED_STATE = MessageState.SCHEDULED
_INDEX = INDEX.pack
_VALUE = itemgetter(1)
# Plain ints for the storm loop: an Enum member lookup there cost a tenth of the move.
_DELIVERED = int(MessageState.DELIVERED)
_U64 = struct.Struct(">Q")  # keys.u64 / read_u64 without the call around them
_PACK, _READ = _U64.pack, _U64.unpack_from
_STAMP_AT, _STAMP_END = DELIVERED_AT_SLICE.start, DELIVERED_AT_SLICE.stop
_DELIVERED_STATE = MessageState.DELIVERED
_SCHEDULED_EVENT = int(EventKind.SCHEDULED)
_SCHEDULED_DELIVERED_EVENTS = bytes((EventKind.SCHEDULED, EventKind.DELIVERED))


class SendOutcome(NamedTuple):
    created: bool  # False: the (topic, msg_id) existed; this is the first send's record
    topic: str
    msg_id: str
    state: MessageState
    deliver_at_ms: int
    created_at_ms: int


def send(txn: Txn, rec: MessageRecord, *, fresh_id: bool = False) -> SendOutcome:
    """Schedule one message; idempotent on (topic, msg_id); a cancelled id stays dead.

    ``fresh_id``: the server made the msg_id just now (app/ids.py: unique by construction),
    so it cannot be in the index and the lookup is skipped.
    """
    index_key = keys.message_key(rec.topic, rec.msg_id)
    out = _send(txn, rec, index_key, None if fresh_id else txn.get(CF.MESSAGES, index_key))
    if out.created and out.state is MessageState.SCHEDULED:
        txn.count_topic(rec.topic, scheduled=1)
    return out


def send_many(
    txn: Txn, recs: Sequence[MessageRecord | None], fresh_ids: Sequence[bool] = ()
) -> list[SendOutcome | Exception | None]:
    """Send each record on its own (None items are skipped), with one multi-get of the index
    for the records whose msg_id the client chose (``fresh_ids[i]``: as in ``send``).

    Every new message (due later or due now) is staged a column at a time with the rest
    (``_stage_new``), with no savepoint, op call or put per message (in process: 3.6 -> 2.2
    µs a message). An id sent before the batch writes nothing: it is answered from its
    index entry; a repeat of an id the batch sends new, from the entry the column staged.
    So a bulk load's repeated rows, a rerun's resends and rows already due keep the batch
    one column."""
    fresh = list(fresh_ids) or [False] * len(recs)
    index_keys = [keys.message_key(r.topic, r.msg_id) if r else b"" for r in recs]
    looked_up = [k for k, new in zip(index_keys, fresh, strict=True) if k and not new]
    found = iter(txn.get_many(CF.MESSAGES, looked_up))
    in_column: set[bytes] = set()
    out: list[SendOutcome | Exception | None] = [None] * len(recs)
    run: list[int] = []  # the places of the new messages, staged together
    repeats: list[int] = []  # the places of repeats of ids in ``run``
    for i, (rec, index_key, new) in enumerate(zip(recs, index_keys, fresh, strict=True)):
        if rec is None:
            continue
        raw = None if new else next(found)
        if raw is not None:  # sent before the batch: no item of it writes this id
            out[i] = _existing_outcome(rec, raw)
        elif index_key in in_column:
            repeats.append(i)
        else:
            in_column.add(index_key)
            run.append(i)
    scheduled: list[MessageRecord] = []
    if run:
        _stage_run(txn, run, repeats, recs, index_keys, out, scheduled)
    _count_scheduled(txn, scheduled)
    return out


def _existing_outcome(rec: MessageRecord, raw: bytes) -> SendOutcome | Exception:
    """``_existing`` with its failure as the outcome: it writes nothing, so no savepoint."""
    try:
        return _existing(rec, raw)
    except Exception as exc:
        return exc


def _stage_run(
    txn: Txn,
    run: list[int],
    repeats: list[int],
    recs: Sequence[MessageRecord | None],
    index_keys: list[bytes],
    out: list[SendOutcome | Exception | None],
    scheduled: list[MessageRecord],
) -> None:
    """Stage the new messages at the places ``run`` as columns, then answer the repeats at
    ``repeats`` from the entries staged for their ids. A record that cannot be encoded
    sends both one at a time in the batch's order instead: each fails alone (a repeat of
    the failed one is then a new send), and every write is the one single sends make."""
    plain = [cast(MessageRecord, recs[i]) for i in run]
    point = txn.savepoint()
    try:
        sent = _stage_new(txn, plain, [index_keys[i] for i in run])
    except Exception:
        txn.rollback(point)
        again = set(repeats)
        for i in sorted(run + repeats):
            raw = txn.get(CF.MESSAGES, index_keys[i]) if i in again else None
            out[i] = _send_one(txn, cast(MessageRecord, recs[i]), index_keys[i], raw, scheduled)
        return
    for i, rec, outcome in zip(run, plain, sent, strict=True):
        out[i] = outcome
        if outcome.state is _SCHEDULED_STATE:
            scheduled.append(rec)
    for i in repeats:
        raw = cast(bytes, txn.get(CF.MESSAGES, index_keys[i]))  # its first copy's, staged
        out[i] = _existing_outcome(cast(MessageRecord, recs[i]), raw)


def _send_one(
    txn: Txn,
    rec: MessageRecord,
    index_key: bytes,
    raw: bytes | None,
    scheduled: list[MessageRecord],
) -> SendOutcome | Exception:
    """``_send`` under a savepoint: a failure undoes this message alone and is its outcome."""
    point = txn.savepoint()
    try:
        sent = _send(txn, rec, index_key, raw)
    except Exception as exc:
        txn.rollback(point)
        return exc
    if sent.created and sent.state is MessageState.SCHEDULED:
        scheduled.append(rec)
    return sent


def _count_scheduled(txn: Txn, recs: Sequence[MessageRecord]) -> None:
    """The topics' scheduled counts: once per topic a batch, not once per message."""
    counts: dict[str, int] = {}
    for rec in recs:
        counts[rec.topic] = counts.get(rec.topic, 0) + 1
    for topic, n in counts.items():
        txn.count_topic(topic, scheduled=n)


def _existing(rec: MessageRecord, raw: bytes) -> SendOutcome:
    """A send of an id already in the index (entry ``raw``): the first send's answer, as
    created=False; a cancelled id stays dead."""
    entry = decode_index(raw)
    if entry.state is MessageState.CANCELLED:
        raise MessageConflict(
            f"message {rec.msg_id!r} in topic {rec.topic!r} was cancelled; "
            "its msg_id cannot be reused"
        )
    return SendOutcome(False, rec.topic, rec.msg_id, entry.state, entry.due_ms, entry.created_at_ms)


def _send(txn: Txn, rec: MessageRecord, index_key: bytes, raw: bytes | None) -> SendOutcome:
    if raw is not None:
        return _existing(rec, raw)
    return _stage_new(txn, [rec], [index_key])[0]  # the topic's scheduled count: the caller's


def _stage_new(txn: Txn, recs: list[MessageRecord], index_keys: list[bytes]) -> list[SendOutcome]:
    """Stage new messages as columns. One due later: a timer key with the encoded record
    (workers/timers/message.py), its event (the record's head: storage/events.py) and its
    index entry. One already due: straight into its topic log as ``deliver`` puts it, never
    a timer key (which is also what makes the deliverer's range delete safe: see
    Writer.scan_horizon), with its scheduled and delivered events. The events are in the
    records' order."""
    now = txn.now_ms
    recs = [r if r.created_at_ms else r._replace(created_at_ms=now) for r in recs]
    values = [message.timer_value(r) for r in recs]
    txn.sync = True
    earliest = min(r.deliver_at_ms for r in recs)
    if earliest <= now:
        return _stage_with_due(txn, recs, index_keys, values)
    timer_of = message.timer_key_of
    txn.put_many(
        CF.TIMERS,
        [
            (timer_of(r.deliver_at_ms, k), v)
            for r, k, v in zip(recs, index_keys, values, strict=True)
        ],
    )
    events.emit_many(txn, EventKind.SCHEDULED, values)
    txn.put_many(CF.MESSAGES, list(zip(index_keys, map(_scheduled_entry, recs), strict=True)))
    txn.schedule_hint(earliest)
    # tuple.__new__: a NamedTuple's own __new__ is a Python call, half the cost
    return [
        tuple.__new__(
            SendOutcome,
            (True, r.topic, r.msg_id, _SCHEDULED_STATE, r.deliver_at_ms, r.created_at_ms),
        )
        for r in recs
    ]


def _stage_with_due(
    txn: Txn, recs: list[MessageRecord], index_keys: list[bytes], values: list[bytes]
) -> list[SendOutcome]:
    """``_stage_new`` of records some of which are due now (``values``: their encodings)."""
    now = txn.now_ms
    stamp = _PACK(now)
    timer_of = message.timer_key_of
    timers: list[tuple[bytes, bytes]] = []
    logs: list[tuple[bytes, bytes]] = []
    index: list[tuple[bytes, bytes]] = []
    event_values: list[bytes] = []
    event_kinds = bytearray()
    delivered: dict[str, int] = {}
    out: list[SendOutcome] = []
    for r, k, v in zip(recs, index_keys, values, strict=True):
        due, created = r.deliver_at_ms, r.created_at_ms
        if due > now:
            timers.append((timer_of(due, k), v))
            index.append((k, _scheduled_entry(r)))
            event_values.append(v)
            event_kinds.append(_SCHEDULED_EVENT)
            state = _SCHEDULED_STATE
        else:  # as deliver(): the record stamped delivered, appended to its topic's log
            lane = keys.topic_lane(r.topic)
            seq = txn.claim_seq(lane)
            stamped = v[:_STAMP_AT] + stamp + v[_STAMP_END:]
            logs.append((lane + _PACK(seq), stamped))
            if v[FLAGS_AT] & TAG_FLAG:
                tagfilter.index(txn, r.topic, stamped, seq)
            index.append((k, _INDEX(_DELIVERED, due, created, now, seq)))
            event_values += (v, stamped)
            event_kinds += _SCHEDULED_DELIVERED_EVENTS
            since = due if due > created else created
            txn.lateness_ms.append(now - since if now > since else 0)
            delivered[r.topic] = delivered.get(r.topic, 0) + 1
            state = _DELIVERED_STATE
        out.append(tuple.__new__(SendOutcome, (True, r.topic, r.msg_id, state, due, created)))
    if timers:
        txn.put_many(CF.TIMERS, timers)
        txn.schedule_hint(min(r.deliver_at_ms for r in recs if r.deliver_at_ms > now))
    txn.put_many(CF.LOGS, logs)
    txn.put_many(CF.MESSAGES, index)
    events.emit_each(txn, event_kinds, event_values)
    for topic, n in delivered.items():
        txn.count_topic(topic, delivered=n)
        txn.woken_topics.add(topic)
    return out


def _scheduled_entry(rec: MessageRecord) -> bytes:
    """A scheduled message's index entry (storage/records.py, IndexEntry)."""
    return _INDEX(_SCHEDULED, rec.deliver_at_ms, rec.created_at_ms, 0, 0)


def deliver(txn: Txn, rec: MessageRecord) -> int:
    """Append a due message to its topic log and mark it delivered; returns its seq.

    Lateness runs from when the message could first be delivered: its deliver time, or
    its arrival if the client gave a time already past (a 1970 deliver_at is not late)."""
    now = txn.now_ms
    value = encode_message(rec.delivered(now))
    seq = lanes.append(txn, keys.topic_lane(rec.topic), value)
    tagfilter.index(txn, rec.topic, value, seq)
    events.emit(txn, EventKind.DELIVERED, value)
    entry = IndexEntry(MessageState.DELIVERED, rec.deliver_at_ms, rec.created_at_ms, now, seq)
    txn.put(CF.MESSAGES, keys.message_key(rec.topic, rec.msg_id), encode_index(entry))
    txn.lateness_ms.append(max(0, now - max(rec.deliver_at_ms, rec.created_at_ms)))
    txn.count_topic(rec.topic, delivered=1)
    txn.woken_topics.add(rec.topic)
    return seq


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    topic: str
    msg_id: str
    cancelled_at_ms: int


def cancel(txn: Txn, topic: str, msg_id: str) -> CancelOutcome:
    """Tombstone the msg_id and delete its timer, in one batch (invariant 4)."""
    index_key = keys.message_key(topic, msg_id)
    raw = txn.get(CF.MESSAGES, index_key)
    if raw is None:
        raise MessageNotFound(f"no message {msg_id!r} in topic {topic!r}")
    entry = decode_index(raw)
    if entry.state is MessageState.CANCELLED:
        return CancelOutcome(topic, msg_id, entry.done_at_ms)
    if entry.state is MessageState.DELIVERED:
        raise MessageConflict(f"message {msg_id!r} in topic {topic!r} was already delivered")
    timer_key = message.timer_key(entry.due_ms, topic, msg_id)
    _emit_cancelled(txn, txn.get(CF.TIMERS, timer_key), topic, msg_id, entry)
    txn.delete(CF.TIMERS, timer_key)
    done = entry._replace(state=MessageState.CANCELLED, done_at_ms=txn.now_ms)
    txn.put(CF.MESSAGES, index_key, encode_index(done))
    txn.put(CF.META, keys.tombstone_key(txn.now_ms, index_key), b"")  # reclaimed after retention
    txn.count_topic(topic, scheduled=-1, cancelled=1)
    txn.cancels += 1
    txn.sync = True
    return CancelOutcome(topic, msg_id, txn.now_ms)


def reschedule(txn: Txn, topic: str, msg_id: str, deliver_at_ms: int) -> SendOutcome:
    """Move a scheduled message to ``deliver_at_ms`` in one batch: the old timer key goes,
    the new one comes (or, if that time has come, the message is delivered now).

    A scanner may hold the old key already: the reschedule counts as a cancel, so that
    move re-reads the index and finds a due time that is not its key's any more.
    """
    index_key = keys.message_key(topic, msg_id)
    raw = txn.get(CF.MESSAGES, index_key)
    if raw is None:
        raise MessageNotFound(f"no message {msg_id!r} in topic {topic!r}")
    entry = decode_index(raw)
    if entry.state is not MessageState.SCHEDULED:
        done = "cancelled" if entry.state is MessageState.CANCELLED else "already delivered"
        raise MessageConflict(f"message {msg_id!r} in topic {topic!r} was {done}")
    old_key = message.timer_key_of(entry.due_ms, index_key)
    value = txn.get(CF.TIMERS, old_key)
    if value is None:
        raise CorruptRecordError(f"message {msg_id!r} in topic {topic!r} has no timer key")
    txn.delete(CF.TIMERS, old_key)
    txn.cancels += 1
    txn.sync = True
    rec = message.decode_value(value)._replace(deliver_at_ms=deliver_at_ms)
    new_value = message.timer_value(rec)
    events.emit(txn, EventKind.RESCHEDULED, new_value)
    state = MessageState.SCHEDULED
    if deliver_at_ms <= txn.now_ms:  # due now: never a timer key (Writer.scan_horizon)
        txn.count_topic(topic, scheduled=-1)
        deliver(txn, rec)
        state = MessageState.DELIVERED
    else:
        txn.put(CF.TIMERS, message.timer_key_of(deliver_at_ms, index_key), new_value)
        txn.put(CF.MESSAGES, index_key, encode_index(entry._replace(due_ms=deliver_at_ms)))
        txn.schedule_hint(deliver_at_ms)
    return SendOutcome(False, topic, msg_id, state, deliver_at_ms, entry.created_at_ms)


def _emit_cancelled(
    txn: Txn, timer: bytes | None, topic: str, msg_id: str, entry: IndexEntry
) -> None:
    if timer is not None:
        events.emit(txn, EventKind.CANCELLED, timer)
    else:  # no timer behind a scheduled entry: not written by this code; still an event
        events.emit_plain(
            txn, EventKind.CANCELLED, topic, msg_id, entry.due_ms, entry.created_at_ms
        )


@dataclass(frozen=True, slots=True)
class MessageStatus:
    entry: IndexEntry
    record: MessageRecord | None  # None once cancelled (the timer is gone) or swept


def status(store: RocksStore, topic: str, msg_id: str) -> MessageStatus:
    """Read a message's state without the writer; retries if a move races the two reads."""
    index_key = keys.message_key(topic, msg_id)
    for _ in range(3):
        raw = store.get(CF.MESSAGES, index_key)
        if raw is None:
            raise MessageNotFound(f"no message {msg_id!r} in topic {topic!r}")
        entry = decode_index(raw)
        if entry.state is MessageState.CANCELLED:
            return MessageStatus(entry, None)
        if entry.state is MessageState.SCHEDULED:
            value = store.get(CF.TIMERS, message.timer_key(entry.due_ms, topic, msg_id))
            if value is None:
                continue  # moved or cancelled between the reads: read the index again
            return MessageStatus(entry, message.decode_value(value))
        value = store.get(CF.LOGS, keys.log_key(keys.topic_lane(topic), entry.seq))
        return MessageStatus(entry, decode_message(value) if value else None)
    return MessageStatus(entry, None)


def fire_run(span: Span, start: int, stop: int) -> None:
    """Deliver a run of message timers: each into its topic log, its index entry marked
    delivered, unless it was cancelled or rescheduled after the scan.

    This is the storm path (millions due at once), so it works on the encoded bytes: the
    topic and msg_id are cut from the key, the record gets its delivered_at stamped in
    place, the index entry is packed afresh; nothing is decoded into objects, and the
    writes are staged a run at a time (a call per key was a third of a storm's move).
    """
    entries = span.entries
    run = entries if stop - start == len(entries) else entries[start:stop]
    txn = span.txn
    if span.recheck:
        # The index key of a message timer is the key minus its 8-byte due prefix.
        # Cancelled (the tombstone wins) or rescheduled (the key's due is not the index's
        # any more: the new key delivers it) after the scan: skipped.
        index_raw = txn.get_many(CF.MESSAGES, [k[8:] for k, _ in run])
        run = [
            entry
            for entry, raw in zip(run, index_raw, strict=True)
            if raw is not None and raw[0] == _SCHEDULED and raw[1:9] == entry[0][:8]
        ]
        if not run:
            return
    now = txn.now_ms
    stamp = _PACK(now)
    lateness = txn.lateness_ms
    logs: list[tuple[bytes, bytes]] = []
    index: list[tuple[bytes, bytes]] = []
    for lane, group in groupby(run, _lane):  # keys of one due time sort by topic
        lane_run = list(group)
        n = len(lane_run)
        seq = txn.claim_seq(lane, n)
        topic = lane[:-1].decode()
        for key, value in lane_run:
            due = _READ(key)[0]
            created = _READ(value, CREATED_AT_OFFSET)[0]
            stamped = value[:_STAMP_AT] + stamp + value[_STAMP_END:]
            logs.append((lane + _PACK(seq), stamped))
            index.append((key[8:], _INDEX(_DELIVERED, due, created, now, seq)))
            if value[FLAGS_AT] & TAG_FLAG:
                tagfilter.index(txn, topic, stamped, seq)
            since = due if due > created else created  # as messages.deliver: max(due, arrival)
            lateness.append(now - since if now > since else 0)
            seq += 1
        txn.woken_topics.add(topic)
        txn.count_topic(topic, scheduled=-n, delivered=n)  # pending falls with scheduled
    txn.put_many(CF.LOGS, logs)
    txn.put_many(CF.MESSAGES, index)
    # One event per delivered message, without a Python loop (storage/events.py).
    events.emit_many(txn, EventKind.DELIVERED, list(map(_VALUE, run)))
    span.moved += len(run)


def _lane(entry: tuple[bytes, bytes]) -> bytes:
    """A message timer's topic log: ``topic ‖ 0x00``, cut from its key."""
    key = entry[0]
    return key[8 : key.index(0, 8) + 1]
