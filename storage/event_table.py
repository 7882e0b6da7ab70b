"""Values of the events CF as one Arrow table with the Parquet schema of pipeline.md, §1.

Imported by the exporter's thread only: pyarrow and numpy take ~0.4 s to import, which
a restart of the server does not wait for."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from storage.errors import CorruptRecordError
from storage.events import (
    COLUMNS,
    CREATED_AT,
    FLAGS_AT,
    HEADER,
    ID_AT,
    KIND_NAMES,
    N_ID_AT,
    N_TAG_AT,
    N_TOPIC_AT,
    PARTITION_COLUMN,
    TAG_FLAG,
    VERSION,
)

_ARROW_TYPES: Final = {"int64": pa.int64(), "int32": pa.int32(), "string": pa.string()}
SCHEMA: Final = pa.schema(
    [pa.field(name, _ARROW_TYPES[kind], nullable=nullable) for name, kind, nullable in COLUMNS]
)
# A sealed segment's (storage/events.py's SEGMENT_COLUMNS): the events' and the partition.
PARTITION: Final = pa.field(
    PARTITION_COLUMN[0], _ARROW_TYPES[PARTITION_COLUMN[1]], nullable=PARTITION_COLUMN[2]
)
SEGMENT_SCHEMA: Final = SCHEMA.append(PARTITION)


_U8 = np.dtype("u1")
IntArray = npt.NDArray[np.int64]
Bytes = npt.NDArray[np.uint8]
# The kind column's strings, one after another: a kind byte picks its slice.
_KIND_BYTES = np.frombuffer("".join(KIND_NAMES).encode(), _U8)
_KIND_LENGTHS = np.array([len(name) for name in KIND_NAMES], dtype=np.int64)
_KIND_AT = np.concatenate(([0], np.cumsum(_KIND_LENGTHS)[:-1]))
_AT_8 = np.arange(8, dtype=np.int64)


def decode(entries: Sequence[tuple[bytes, bytes]]) -> pa.Table:
    """Values of the events CF (with their keys: the first seq) as one table, in seq order.

    No Python loop per value or event: the values are joined into one buffer and every
    field of every event is gathered from it by numpy; the columns are Arrow arrays made
    from those buffers (``pa.array`` of numpy would import pandas, ~0.5 s of the GIL)."""
    try:
        return _decode(entries)
    except (struct.error, ValueError, IndexError, pa.ArrowInvalid) as exc:
        raise CorruptRecordError(f"undecodable event batch: {exc}") from exc


def _decode(entries: Sequence[tuple[bytes, bytes]]) -> pa.Table:
    if not entries:
        return SCHEMA.empty_table()
    keys, values = zip(*entries, strict=True)
    firsts = np.frombuffer(b"".join(keys), ">u8").astype(np.int64)
    if len(firsts) != len(values):
        raise CorruptRecordError("event batch with a malformed key")
    buf = np.frombuffer(b"".join(values), _U8)
    v_len = np.fromiter(map(len, values), np.int64, len(values))
    v_at = _starts(v_len)
    if (v_len < HEADER.size).any():
        raise CorruptRecordError("event batch shorter than its header")
    if (buf[v_at] != VERSION).any():
        raise CorruptRecordError("event batch of an unknown version")
    n = _little(buf, v_at + 1, 4)
    at_ms = _little(buf, v_at + 5, 8)
    g_size, t_size = _little(buf, v_at + 13, 4), _little(buf, v_at + 17, 4)
    groups_at = v_at + HEADER.size + 11 * n
    topics_at = groups_at + g_size
    heads_at = topics_at + t_size
    if (n < 1).any() or (heads_at > v_at + v_len).any():
        raise CorruptRecordError("event batch with cut columns")
    # Per event: its value's column base, its value's n, its index inside the value.
    first_event = _starts(n)
    total = int(n.sum())
    base = np.repeat(v_at + HEADER.size, n)
    n_e = np.repeat(n, n)
    i = np.arange(total, dtype=np.int64) - np.repeat(first_event, n)
    kinds = buf[base + i].astype(np.int64)
    attempts = _little(buf, base + n_e + 4 * i, 4).astype(np.int32)
    glens = buf[base + 5 * n_e + i].astype(np.int64)
    tlens = buf[base + 6 * n_e + i].astype(np.int64)
    hlens = _little(buf, base + 7 * n_e + 4 * i, 4)
    if (kinds == 0).any() or (kinds >= len(KIND_NAMES)).any():
        raise CorruptRecordError("event batch with an unknown kind")
    head = _packed(heads_at, hlens, n, first_event)
    group_at = _packed(groups_at, glens, n, first_event)
    topic_at = _packed(topics_at, tlens, n, first_event)
    # Each value's pieces must end where the next section (or the value) does.
    ends = first_event + n - 1
    if (
        (head[ends] + hlens[ends] != v_at + v_len).any()
        or (group_at[ends] + glens[ends] != topics_at).any()
        or (topic_at[ends] + tlens[ends] != heads_at).any()
        or (hlens < ID_AT).any()
    ):
        raise CorruptRecordError("event batch with a cut record head or cut names")
    n_id = buf[head + N_ID_AT].astype(np.int64)
    n_topic = buf[head + N_TOPIC_AT].astype(np.int64)
    n_tag = buf[head + N_TAG_AT].astype(np.int64) << 8 | buf[head + N_TAG_AT + 1]
    has_tag = (buf[head + FLAGS_AT] & TAG_FLAG) != 0
    if (ID_AT + n_id + n_topic + n_tag > hlens).any():
        raise CorruptRecordError("event batch with a cut record head")
    own_topic = tlens > 0
    columns = [
        _ints(
            pa.int64(),
            np.repeat(firsts, n) + np.arange(total, dtype=np.int64) - np.repeat(first_event, n),
        ),
        _ints(pa.int64(), np.repeat(at_ms, n)),
        _strings(_KIND_BYTES, _KIND_AT[kinds], _KIND_LENGTHS[kinds]),
        _strings(
            buf,
            np.where(own_topic, topic_at, head + ID_AT + n_id),
            np.where(own_topic, tlens, n_topic),
        ),
        _strings(buf, head + ID_AT, n_id),
        _strings(buf, group_at, glens, glens > 0),
        _ints(pa.int32(), attempts, attempts != 0),
        _ints(pa.int64(), _big_u64(buf, head)),
        _ints(pa.int64(), _big_u64(buf, head + CREATED_AT)),
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


def _packed(
    section_at: IntArray, lengths: IntArray, n: IntArray, first_event: IntArray
) -> IntArray:
    """Where each event's piece starts, for pieces packed one after another in a section
    of each value that starts at ``section_at``."""
    at = _starts(lengths)
    return at + np.repeat(section_at - at[first_event], n)


def _little(buf: Bytes, at: IntArray, width: int) -> IntArray:
    """The little-endian unsigned ints of ``width`` bytes at ``at``."""
    raw = np.ascontiguousarray(buf[at[:, None] + _AT_8[:width]])
    return raw.view(f"<u{width}").ravel().astype(np.int64)


def _big_u64(buf: Bytes, at: IntArray) -> IntArray:
    raw = np.ascontiguousarray(buf[at[:, None] + _AT_8])
    return raw.view(">u8").ravel().astype(np.int64)


def with_partition(table: pa.Table, partition: int) -> pa.Table:
    """``table`` (decode's) with the partition column, the same on every row."""
    rows = np.full(table.num_rows, partition, dtype=np.int32)
    return table.append_column(PARTITION, _ints(pa.int32(), rows))


def _ints(
    kind: pa.DataType, values: npt.NDArray[np.integer], valid: npt.NDArray[np.bool_] | None = None
) -> pa.Array:
    """An int column from ``values`` (null where not ``valid``)."""
    validity, nulls = _validity(valid)
    return pa.Array.from_buffers(
        kind, len(values), [validity, pa.py_buffer(np.ascontiguousarray(values))], null_count=nulls
    )


def _validity(valid: npt.NDArray[np.bool_] | None) -> tuple[pa.Buffer | None, int]:
    if valid is None:
        return None, 0
    nulls = int(len(valid) - np.count_nonzero(valid))
    return (pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None), nulls


def _strings(
    buf: Bytes,
    at: IntArray,
    lengths: IntArray,
    valid: npt.NDArray[np.bool_] | None = None,
) -> pa.Array:
    """A string column gathered from ``buf[at[i] : at[i] + lengths[i]]`` (null where not
    ``valid``; those have length 0)."""
    offsets = np.zeros(len(at) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = buf[np.repeat(at - offsets[:-1], lengths) + np.arange(offsets[-1])]
    validity, nulls = _validity(valid)
    return pa.Array.from_buffers(
        pa.string(),
        len(at),
        [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )
