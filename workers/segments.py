"""Sealed segments of the event log: zstd Parquet files under ``<data_dir>/events/``.

``date=YYYY-MM-DD/part-<first seq>-<last seq>.parquet`` (the UTC day of the events, Hive
style, so Spark finds a ``date`` partition column). A segment is written under a hidden
name (leading ``.``: Spark and Hadoop skip it), fsynced, renamed, and its directory
fsynced: a reader sees a whole file or none. Its seq range is in its name, so a re-export
of the same range after a crash writes the same name and replaces the file, never adds
a second copy.

Why pyarrow: it writes Parquet with zstd from columns that numpy built in bulk (the
exporter never loops in Python per event), and Parquet is what Spark reads best
(pipeline.md); pyarrow is the reference implementation Spark's own Arrow path uses.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
from typing import TYPE_CHECKING, NamedTuple

from storage import dirs

if TYPE_CHECKING:
    import pyarrow as pa

DAY_MS = 86_400_000
_PART = re.compile(r"^part-(\d+)-(\d+)\.parquet$")
_DAY = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
_TIME_COLUMN = 1  # event_time_ms, in storage/event_table.SCHEMA
# Dictionaries only where values repeat: one for msg_id (all distinct) was built, found
# too big and thrown away, for every page (it was 40 % of a segment's write time).
DICTIONARY_COLUMNS = ["kind", "topic", "group", "tag", "partition"]  # partition: one value
# Seqs and times that grow (or sit close together): deltas take ~1 byte, not 8 (the file
# is under half the size, written in no more time; Spark reads DELTA_BINARY_PACKED).
DELTA_COLUMNS = dict.fromkeys(
    ["seq", "event_time_ms", "deliver_at_ms", "created_at_ms"], "DELTA_BINARY_PACKED"
)


class Segment(NamedTuple):
    path: str
    first: int
    last: int


def day_of(at_ms: int) -> str:
    """The UTC date of an instant, as the partition names it."""
    return dt.datetime.fromtimestamp(at_ms / 1000, dt.UTC).strftime("%Y-%m-%d")


def _day_start_ms(day: str) -> int:
    start = dt.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=dt.UTC)
    return int(start.timestamp()) * 1000


def segments(root: str) -> list[Segment]:
    """Every sealed segment, in seq order."""
    out: list[Segment] = []
    for _, path in _partitions(root):
        for name in os.listdir(path):
            m = _PART.match(name)
            if m:
                out.append(Segment(os.path.join(path, name), int(m[1]), int(m[2])))
    return sorted(out, key=lambda s: s.first)


def _partitions(root: str) -> list[tuple[str, str]]:
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    found = [(_DAY.match(name), os.path.join(root, name)) for name in names]
    return sorted((m[1], path) for m, path in found if m)


def sealed_from(root: str, first: int) -> Segment | None:
    """The segment that starts at ``first``, if one was sealed (before a crash kept its
    events in the store)."""
    for _, path in _partitions(root):
        for name in os.listdir(path):
            m = _PART.match(name)
            if m and int(m[1]) == first:
                return Segment(os.path.join(path, name), first, int(m[2]))
    return None


def write(root: str, table: pa.Table, day: str, first: int, last: int) -> Segment:
    """Seal ``table`` (events ``first..last`` of ``day``) as a segment, atomically."""
    # pyarrow here, not at the top: the server lists, finds and expires segments, and only
    # its sealer process (workers/sealer.py) writes them; ~50 MiB it never needs.
    import pyarrow.parquet as pq

    directory = os.path.join(root, f"date={day}")
    dirs.makedirs(directory)  # events/ too, the first time: each name fsynced in its parent
    name = f"part-{first}-{last}.parquet"
    # Hidden, and this process's own: a sealer orphaned by a SIGKILLed server may still be
    # finishing the same range; it renames only the file it wrote (workers/sealer.py).
    hidden = os.path.join(directory, f".{name}.{os.getpid()}")
    with open(hidden, "wb") as out:
        pq.write_table(
            table,
            out,
            compression="zstd",
            use_dictionary=DICTIONARY_COLUMNS,
            column_encoding=DELTA_COLUMNS,
        )
        out.flush()
        os.fsync(out.fileno())
    final = os.path.join(directory, name)
    os.replace(hidden, final)
    dirs.fsync_dir(directory)
    return Segment(final, first, last)


def remove_hidden(root: str) -> int:
    """Delete what a crash left half-written (hidden files); returns how many."""
    gone = 0
    for _, path in _partitions(root):
        for name in os.listdir(path):
            if name.startswith("."):
                os.unlink(os.path.join(path, name))
                gone += 1
    return gone


def expire(root: str, cutoff_ms: int, newest: dict[str, int]) -> int:
    """Delete every segment whose newest event is older than ``cutoff_ms``; returns how
    many. Whole days before the cutoff go by name; in the day of the cutoff, each file's
    footer statistics say how new its newest event is (remembered in ``newest``: a
    segment never changes)."""
    gone = 0
    for day, path in _partitions(root):
        start = _day_start_ms(day)
        if start >= cutoff_ms:
            break
        if start + DAY_MS <= cutoff_ms:
            names = [name for name in os.listdir(path) if _PART.match(name)]
            shutil.rmtree(path)
            for name in names:
                newest.pop(os.path.join(path, name), None)
            gone += len(names)
            continue
        for name in os.listdir(path):
            file = os.path.join(path, name)
            if not _PART.match(name):
                continue
            if file not in newest:
                newest[file] = _newest_ms(file)
            if newest[file] < cutoff_ms:
                os.unlink(file)
                del newest[file]
                gone += 1
    return gone


def _newest_ms(path: str) -> int:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    newest = 0
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(_TIME_COLUMN).statistics
        if stats is None or not stats.has_min_max:  # not written by us: read the column
            times = pq.read_table(path, columns=["event_time_ms"]).column(0)
            return int(pc.max(times).as_py() or 0)
        newest = max(newest, int(stats.max))
    return newest
