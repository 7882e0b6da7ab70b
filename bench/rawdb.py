"""In-process RocksDB ceilings: what rocksdict alone does with the service's keys and values.

The same RocksDB options as storage/store.py, the same key codec and record encodings,
none of the engine around them (no HTTP, no validation, no writer queue, no Txn overlay).
Figure 2 compares batch sends with ``write_ceiling``, figure 4 the storm drain with
``move_ceiling``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

from rocksdict import Rdict, ReadOptions, WriteBatch, WriteOptions

from storage import keys
from storage.records import (
    INDEX,
    IndexEntry,
    MessageRecord,
    MessageState,
    encode_index,
)
from storage.store import _options as rocks_options  # the service's own: tuning carries over
from workers.deliverer import DELIVER_BATCH
from workers.timers import message

TOPIC = "bench"
BODY = b"b" * 128  # with header, msg_id and topic the stored timer value is ~190 B
MSG_ID_LEN = 26  # the server's generated ids (ULID-like) are this long
SETUP_BATCH = 1_000  # messages per WriteBatch while preparing the move ceiling (untimed)
COLUMN_FAMILIES = ("timers", "messages", "logs", "meta")


def open_db(path: Path) -> Rdict:
    opts = rocks_options()
    return Rdict(str(path), opts, column_families=dict.fromkeys(COLUMN_FAMILIES, opts))


def message_kv(i: int, due_ms: int, now_ms: int) -> tuple[bytes, bytes, bytes, bytes]:
    """(timer key, timer value, index key, index value) of message ``i``, as stored."""
    msg_id = f"{i:0{MSG_ID_LEN}d}"
    rec = MessageRecord(TOPIC, msg_id, due_ms, now_ms, BODY)
    entry = IndexEntry(MessageState.SCHEDULED, due_ms, now_ms)
    return (
        message.timer_key(due_ms, TOPIC, msg_id),
        message.timer_value(rec),
        keys.message_key(TOPIC, msg_id),
        encode_index(entry),
    )


def write_ceiling(path: Path, batches: int, size: int, delay_ms: int) -> float:
    """Messages/s of ``batches`` synced WriteBatches of ``size`` messages (2 keys each).

    Keys and values are made before the clock starts; the timed part is filling each
    WriteBatch and writing it with sync=True (WAL fsync), one after another.
    """
    db = open_db(path)
    try:
        timers = db.get_column_family_handle("timers")
        index = db.get_column_family_handle("messages")
        synced = WriteOptions()
        synced.sync = True
        now = time.time_ns() // 1_000_000
        elapsed = 0.0
        for b in range(batches):
            kvs = [message_kv(b * size + i, now + delay_ms, now) for i in range(size)]
            started = time.perf_counter()
            wb = WriteBatch(raw_mode=True)
            for timer_k, timer_v, index_k, index_v in kvs:
                wb.put(timer_k, timer_v, timers)
                wb.put(index_k, index_v, index)
            db.write(wb, synced)
            elapsed += time.perf_counter() - started
        return batches * size / elapsed
    finally:
        db.close()


def move_ceiling(path: Path, n: int, batch: int = DELIVER_BATCH) -> float:
    """Timers/s moved by a bare loop doing the deliverer's storage work for ``n`` due timers.

    Untimed: write ``n`` timers due at one instant, with their index entries. Timed: scan
    ``batch`` due keys at a time, multi-get their index entries, and write one unsynced
    WriteBatch (as moves are) with a topic-log entry and a DELIVERED index entry per
    message, a range delete of the span, the watermark and the log's seq counter.
    """
    db = open_db(path)
    try:
        cf = {name: db.get_column_family(name) for name in COLUMN_FAMILIES}
        handle = {name: db.get_column_family_handle(name) for name in COLUMN_FAMILIES}
        unsynced = WriteOptions()
        now = time.time_ns() // 1_000_000
        due = now + 1
        for start in range(0, n, SETUP_BATCH):
            wb = WriteBatch(raw_mode=True)
            for i in range(start, min(n, start + SETUP_BATCH)):
                timer_k, timer_v, index_k, index_v = message_kv(i, due, now)
                wb.put(timer_k, timer_v, handle["timers"])
                wb.put(index_k, index_v, handle["messages"])
            db.write(wb, unsynced)

        lane = keys.topic_lane(TOPIC)
        end = keys.due_bound(due + 1)
        cursor, seq, moved = b"", 0, 0
        started = time.perf_counter()
        while True:
            read = ReadOptions()
            read.set_iterate_upper_bound(end)
            it = cf["timers"].iter(read)
            it.seek(cursor)
            span: list[tuple[bytes, bytes]] = []
            while it.valid() and len(span) < batch:
                span.append((it.key(), it.value()))
                it.next()
            del it
            if not span:
                break
            index_keys = [k[8:] for k, _ in span]  # timer key = u64 due ‖ topic ‖ 0 ‖ msg_id
            found = cf["messages"].get(cast(list[Any], index_keys))
            states: list[bytes | None] = [None] * len(span) if found is None else found
            wb = WriteBatch(raw_mode=True)
            for (_, value), index_k, state in zip(span, index_keys, states, strict=True):
                if state is None:
                    continue
                wb.put(keys.log_key(lane, seq), value[1:], handle["logs"])
                wb.put(
                    index_k,
                    INDEX.pack(MessageState.DELIVERED, due, now, now, seq),
                    handle["messages"],
                )
                seq += 1
            cursor = keys.successor(span[-1][0])
            wb.delete_range(span[0][0], cursor, handle["timers"])
            wb.put(keys.WATERMARK_KEY, cursor, handle["meta"])
            wb.put(keys.next_seq_key(lane), keys.u64(seq), handle["meta"])
            db.write(wb, unsynced)
            moved += len(span)
        elapsed = time.perf_counter() - started
        return moved / elapsed
    finally:
        db.close()
