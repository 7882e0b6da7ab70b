"""The partitions of a data directory: how many, where each keeps its store, which topic
belongs to which, and which worker process owns it.

P is fixed when a data directory is created and recorded in it
(``<data_dir>/partitions.json``): a topic's partition is ``crc32(name) % P``, so another P
would put topics where their data is not. A data directory with a RocksDB at its root and
no record is the one-partition layout (P = 1: the store at the root, nothing recorded).

Everything a topic has lives in its partition: its timers, its log, its groups' cursors,
in-flight records and retry lanes (keyed by the topic), and the dead letters of its
messages — a nack runs on the source topic's partition and appends to that partition's
``%DLQ%group``.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass

LAYOUT_FILE = "partitions.json"
HASH = "crc32"  # of the topic's UTF-8 name, modulo P; recorded beside P
MAX_PARTITIONS = 1_024


class LayoutError(Exception):
    """The data directory and the settings disagree (one line, exit 2)."""


def partition_of(topic: str, partitions: int) -> int:
    """The partition a topic belongs to: stable across processes, restarts and machines."""
    return zlib.crc32(topic.encode()) % partitions


@dataclass(frozen=True, slots=True)
class Layout:
    data_dir: str
    partitions: int
    workers: int

    def partition_dir(self, k: int) -> str:
        return os.path.join(self.data_dir, f"p{k}")

    def owner(self, k: int) -> int:
        """The worker that owns partition ``k``."""
        return k % self.workers

    def owned(self, worker: int) -> list[int]:
        return [k for k in range(self.partitions) if self.owner(k) == worker]


def recorded(data_dir: str) -> int | None:
    """P as the data directory records it; None for a directory nothing was stored in."""
    path = os.path.join(data_dir, LAYOUT_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        # A store at the root: the one-partition layout.
        return 1 if os.path.exists(os.path.join(data_dir, "CURRENT")) else None
    try:
        record = json.loads(raw)
        partitions = record["partitions"]
        hashed = record["hash"]
    except (ValueError, TypeError, KeyError):
        raise LayoutError(f"{path} is not a partition record; restore it from a backup") from None
    if not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS or hashed != HASH:
        raise LayoutError(f"{path} records an unknown layout: {raw[:200]!r}")
    return partitions


def record(data_dir: str, partitions: int) -> None:
    """Write the record durably: the file, then its directory entry."""
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, LAYOUT_FILE)
    temp = f"{path}.{os.getpid()}.tmp"
    with open(temp, "wb") as f:
        f.write(json.dumps({"partitions": partitions, "hash": HASH}).encode() + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def keep(layout: Layout) -> None:
    """Record a partitioned data directory's P if it is new (the one-partition layout
    records nothing: its store at the root says it)."""
    if layout.partitions > 1 and recorded(layout.data_dir) is None:
        record(layout.data_dir, layout.partitions)


def cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's cpuset too)."""
    return len(os.sched_getaffinity(0))


def default_workers(port: int) -> int:
    """ROCKTIMER_WORKERS unset (0): one worker per core. On port 0 (any free port) one:
    workers share the one port they all bind, which port 0 would make a different one per
    worker and per restart."""
    return 1 if port == 0 else cores()


def resolve(data_dir: str, partitions: int, workers: int, default: int) -> tuple[Layout, str]:
    """The layout to run, and a line to log when it runs fewer workers than ``default``;
    nothing is written (``keep`` records a new partitioned data directory).

    ``partitions`` (ROCKTIMER_PARTITIONS; 0: as recorded, or one per worker for a new data
    directory) is checked against the record. ``workers`` (ROCKTIMER_WORKERS) above the
    partitions is an error; 0 is ``default``, capped at the partitions: a data directory
    made with fewer partitions (the one-partition layout of a one-process start) keeps
    serving, one worker per partition."""
    have = recorded(data_dir)
    wanted = workers or default
    if have is None:
        have = partitions or wanted
    elif partitions and partitions != have:
        raise LayoutError(
            f"the data dir {data_dir} has {have} partition{'s' * (have > 1)}; "
            f"ROCKTIMER_PARTITIONS={partitions} cannot change that (set it to {have} or leave "
            "it unset, or use another data dir)"
        )
    if workers > have:
        raise LayoutError(
            f"ROCKTIMER_WORKERS={workers} needs at least {workers} partitions; the data dir "
            f"{data_dir} has {have} (set ROCKTIMER_WORKERS to at most {have})"
        )
    note = ""
    if wanted > have:
        note = (
            f"the data dir {data_dir} has {have} partition{'s' * (have > 1)}: {have} worker "
            f"process{'es' * (have > 1)}, not one per core ({wanted}); a data dir's partitions "
            "are fixed when it is made (a new one gets one per worker)"
        )
    return Layout(data_dir, have, min(wanted, have)), note
