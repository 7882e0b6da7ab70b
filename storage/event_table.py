"""Values of the events CF as one Arrow table with the Parquet schema of pipeline.md, §1.

Imported by the exporter's thread only: pyarrow and numpy take ~0.4 s to import, which
a restart of the server does not wait for (bench figure 7)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from storage.errors import CorruptRecordError
from storage.events import (
    CREATED_AT,
    FLAGS_AT,
    HEADER,
    ID_AT,
    KIND_NAMES,
    N_ID_AT,
    N_TAG_AT,
    N_TOPIC_AT,
    TAG_FLAG,
    VERSION,
)

SCHEMA: Final = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("event_time_ms", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("msg_id", pa.string(), nullable=False),
        pa.field("group", pa.string()),
        pa.field("attempt", pa.int32()),
        pa.field("deliver_at_ms", pa.int64()),
        pa.field("created_at_ms", pa.int64()),
        pa.field("tag", pa.string()),
    ]
)


_I32, _U32, _U8 = np.dtype("<i4"), np.dtype("<u4"), np.dtype("u1")
IntArray = npt.NDArray[np.int64]


def decode(entries: Sequence[tuple[bytes, bytes]]) -> pa.Table:
    """Values of the events CF (with their keys: the first seq) as one table, in seq order.

    Python touches each value once (to cut its sections); the events inside are decoded by
    numpy over all values at once."""
    try:
        return _decode(entries)
    except (struct.error, ValueError, IndexError, pa.ArrowInvalid) as exc:
        raise CorruptRecordError(f"undecodable event batch: {exc}") from exc


def _decode(entries: Sequence[tuple[bytes, bytes]]) -> pa.Table:
    sections: list[list[bytes]] = [[] for _ in range(8)]
    firsts: list[int] = []
    counts: list[int] = []
    nows: list[int] = []
    for key, value in entries:
        version, n, now, n_group, n_topic = HEADER.unpack_from(value)
        if version != VERSION:
            raise CorruptRecordError(f"event batch of unknown version {version}")
        firsts.append(int.from_bytes(key, "big"))
        counts.append(n)
        nows.append(now)
        pos = HEADER.size
        for i, size in enumerate((n, 4 * n, n, n, 4 * n, n_group, n_topic)):
            sections[i].append(value[pos : pos + size])
            pos += size
        sections[7].append(value[pos:])
    kinds_b, attempts_b, glens_b, tlens_b, hlens_b, groups_b, topics_b, heads_b = (
        b"".join(parts) for parts in sections
    )
    total = len(kinds_b)
    n_per = np.array(counts, dtype=np.int64)
    base = np.repeat(np.array(firsts, dtype=np.int64) - _starts(n_per), n_per)
    seq = base + np.arange(total, dtype=np.int64)
    at = np.repeat(np.array(nows, dtype=np.int64), n_per)
    kinds = np.frombuffer(kinds_b, _U8)
    attempts = np.frombuffer(attempts_b, _I32)
    glens = np.frombuffer(glens_b, _U8).astype(np.int64)
    tlens = np.frombuffer(tlens_b, _U8).astype(np.int64)
    hlens = np.frombuffer(hlens_b, _U32).astype(np.int64)
    # One buffer for every string: heads, then topics, then groups.
    buf = np.frombuffer(heads_b + topics_b + groups_b, _U8)
    head = _starts(hlens)
    if len(tlens) != total or (hlens < ID_AT).any() or int(hlens.sum()) != len(heads_b):
        raise CorruptRecordError("event batch with a cut record head")
    n_id = buf[head + N_ID_AT].astype(np.int64)
    n_topic = buf[head + N_TOPIC_AT].astype(np.int64)
    n_tag = buf[head + N_TAG_AT].astype(np.int64) << 8 | buf[head + N_TAG_AT + 1]
    has_tag = (buf[head + FLAGS_AT] & TAG_FLAG) != 0
    if (ID_AT + n_id + n_topic + n_tag > hlens).any() or (kinds >= len(KIND_NAMES)).any():
        raise CorruptRecordError("event batch with a cut record head or an unknown kind")
    if int(tlens.sum()) != len(topics_b) or int(glens.sum()) != len(groups_b):
        raise CorruptRecordError("event batch with cut names")
    own_topic = tlens > 0
    topic_at = np.where(own_topic, len(heads_b) + _starts(tlens), head + ID_AT + n_id)
    topic_len = np.where(own_topic, tlens, n_topic)
    group_at = len(heads_b) + len(topics_b) + _starts(glens)
    if (kinds == 0).any():
        raise CorruptRecordError("event batch with an unknown kind")
    columns = [
        pa.array(seq),
        pa.array(at),
        pa.array(KIND_NAMES).take(pa.array(kinds)),
        _strings(buf, topic_at, topic_len),
        _strings(buf, head + ID_AT, n_id),
        _strings(buf, group_at, glens, glens > 0),
        pa.array(attempts, mask=attempts == 0),
        pa.array(_u64_be(buf, head)),
        pa.array(_u64_be(buf, head + CREATED_AT)),
        _strings(buf, head + ID_AT + n_id + n_topic, n_tag, has_tag),
    ]
    table = pa.Table.from_arrays(columns, schema=SCHEMA)
    table.validate(full=True)  # UTF-8 and offsets: a torn value fails here, not in Spark
    return table


def _starts(lengths: IntArray) -> IntArray:
    """Where each of consecutive pieces of these lengths starts."""
    out = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=out[1:])
    return out


def _u64_be(buf: npt.NDArray[np.uint8], at: IntArray) -> IntArray:
    raw = buf[at[:, None] + np.arange(8)]
    return np.ascontiguousarray(raw).view(">u8").ravel().astype(np.int64)


def _strings(
    buf: npt.NDArray[np.uint8],
    at: IntArray,
    lengths: IntArray,
    valid: npt.NDArray[np.bool_] | None = None,
) -> pa.Array:
    """A string column gathered from ``buf[at[i] : at[i] + lengths[i]]`` (null where not
    ``valid``; those have length 0)."""
    offsets = np.zeros(len(at) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = buf[np.repeat(at - offsets[:-1], lengths) + np.arange(offsets[-1])]
    validity = None
    nulls = 0
    if valid is not None:
        nulls = int(len(valid) - valid.sum())
        validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        pa.string(),
        len(at),
        [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )
