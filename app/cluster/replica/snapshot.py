"""Snapshots: what keeps a partition's rebuild bounded.

The changelog subject would grow for ever, and a node that joins would replay all of it.
So a standby, once it has applied SNAPSHOT_RECORDS records, or records of as many bytes as
its last snapshot had (SNAPSHOT_MIN_BYTES at least), since its last snapshot, takes a RocksDB
checkpoint of its copy (a consistent point: the copy holds exactly the records up to S),
packs it as a tar and puts it in the JetStream object store ``rocktimer_snapshots`` under
``p<k>`` (replicated like the stream), then purges the subject below S (record S itself
stays: the owner's next append expects it as the subject's last). A rebuild therefore
reads one snapshot and, after it, at most SNAPSHOT_RECORDS records and about as many bytes
of records as the snapshot itself (plus what came during the rebuild): bounded by the live
data, not by the history; and a snapshot costs in proportion to the writes since the last.

Every record names the seq of the record before it (header ``Rocktimer-Prev``: the
expected last seq it was appended with), so a standby that finds a gap (records purged
below it while it was away) knows, and restores the snapshot instead of going on with a
copy that misses writes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tarfile
import tempfile

import nats.js.errors
from nats.js.api import ObjectMeta, ObjectMetaOptions

from app.cluster.replica.bus import API_TIMEOUT_S, SNAPSHOT_BUCKET, STREAM, Bus, subject
from storage.store import RocksStore

log = logging.getLogger("rocktimer.cluster")

SNAPSHOT_RECORDS = 100_000  # records applied between two snapshots of a partition, at most
SNAPSHOT_MIN_BYTES = 256 * 1024 * 1024  # or bytes of records, when the copy is smaller
TRANSFER_TIMEOUT_S = 600.0  # one snapshot's upload or download
SEQ_PREFIX = "changelog-seq="  # the object's description: the seq the snapshot holds up to


def name(k: int) -> str:
    return f"p{k}"


def take(store: RocksStore, work_dir: str) -> str:
    """A checkpoint of ``store`` in ``work_dir`` (quick: hard links, memtables flushed)."""
    checkpoint = os.path.join(work_dir, "checkpoint")
    store.checkpoint(checkpoint)
    return checkpoint


def pack(checkpoint: str, seq: int, work_dir: str) -> str:
    """A tar of ``checkpoint`` (slow for a large copy: on a thread of its own)."""
    tar_path = os.path.join(work_dir, f"snapshot-{seq}.tar")
    with tarfile.open(tar_path, "w") as tar:
        tar.add(checkpoint, arcname=".")
    shutil.rmtree(checkpoint)
    return tar_path


async def put(bus: Bus, k: int, checkpoint: str, seq: int, work_dir: str) -> int:
    """Pack a checkpoint holding the changelog up to ``seq`` and store it (``upload``);
    its size in bytes."""
    tar_path = await asyncio.to_thread(pack, checkpoint, seq, work_dir)
    await upload(bus, k, tar_path, seq)
    return os.path.getsize(tar_path)


async def upload(bus: Bus, k: int, tar_path: str, seq: int) -> None:
    """Put the snapshot (unless a later one is stored already), then purge the subject
    below the seq of the snapshot stored now (keeping that record): if another node's
    older snapshot replaced this one meanwhile, less is purged, never records it lacks."""
    if await latest_seq(bus, k) >= seq:
        return
    obs = await bus.js.object_store(SNAPSHOT_BUCKET)
    with open(tar_path, "rb") as f:
        meta = ObjectMeta(
            name=name(k),
            description=f"{SEQ_PREFIX}{seq}",
            # chunks as large as a message may be: nats-py sends and acks them one by one
            options=ObjectMetaOptions(max_chunk_size=bus.max_record_bytes),
        )
        await obs.put(name(k), f, meta=meta)
    stored = min(seq, await latest_seq(bus, k))
    if stored > 0:
        await bus.js.purge_stream(STREAM, subject=subject(k), seq=stored)
    log.info("p%d: snapshot at changelog seq %d stored, records below %d purged", k, seq, stored)


async def latest_seq(bus: Bus, k: int) -> int:
    """The seq the stored snapshot of k holds up to, 0 if there is none."""
    obs = await bus.js.object_store(SNAPSHOT_BUCKET)
    try:
        info = await obs.get_info(name(k))
    except nats.js.errors.NotFoundError:
        return 0
    description = info.description or ""
    return int(description[len(SEQ_PREFIX) :]) if description.startswith(SEQ_PREFIX) else 0


async def _download(bus: Bus, k: int, tar_path: str) -> None:
    obs = await bus.js.object_store(SNAPSHOT_BUCKET)
    with open(tar_path, "wb") as f:
        await obs.get(name(k), writeinto=f)


def restore(bus: Bus, k: int, path: str) -> int:
    """Make ``path`` (absent or to be replaced) the stored snapshot of k; the seq it holds
    up to, 0 (and ``path`` left absent) if there is none. From a thread, not the loop."""
    seq = bus.call(latest_seq(bus, k), API_TIMEOUT_S * 3)
    if seq == 0:
        return 0
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix=".restore-") as work:
        tar_path = os.path.join(work, "snapshot.tar")
        bus.call(_download(bus, k, tar_path), TRANSFER_TIMEOUT_S)
        unpacked = os.path.join(work, "db")
        with tarfile.open(tar_path) as tar:
            _extract(tar, unpacked)
        if os.path.exists(path):
            shutil.rmtree(path)
        os.rename(unpacked, path)
    log.info("p%d: restored from the snapshot at changelog seq %d", k, seq)
    return seq


def _extract(tar: tarfile.TarFile, into: str) -> None:
    """Regular files and directories only, inside ``into``: a snapshot is data, whatever
    the object store hands back (tarfile's "data" filter as well, where Python has it)."""
    root = os.path.realpath(into)
    for member in tar.getmembers():
        target = os.path.realpath(os.path.join(into, member.name))
        if not (member.isfile() or member.isdir()) or os.path.commonpath([root, target]) != root:
            raise tarfile.TarError(f"unexpected member in a snapshot: {member.name!r}")
    if hasattr(tarfile, "data_filter"):
        tar.extractall(into, filter="data")
    else:  # Python before 3.11.4: the members were checked above
        tar.extractall(into)
