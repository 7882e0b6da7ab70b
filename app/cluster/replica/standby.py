"""A standby: partition k's copy on a node that does not own it, kept up with the changelog.

It reads ``rocktimer.changelog.<k>`` with an ordered consumer from the seq after the one
its copy holds, and writes each run of records that arrived together as one WriteBatch
(``RocksStore.write_commits``), with the seq applied in that same batch: a crash keeps both
or neither, and the next start reads on from there. An empty copy is rebuilt from the
stream (from the latest snapshot, if there is one: snapshot.py). Every so many records
applied (snapshot.py says when) it stores a snapshot of its copy and purges the records
below it; if it
finds records missing before the next one (purged while it was away), it restores the
snapshot and reads on from there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import shutil
import tempfile
import threading
import time

import nats.errors
from nats.aio.subscription import Subscription
from nats.js.api import ConsumerConfig, DeliverPolicy

from app.cluster.replica.bus import Bus, subject
from app.cluster.replica.codec import (
    COMMITS,
    FENCE,
    LAST_PART,
    PART,
    Commit,
    decode_commits,
    decode_fence,
)
from app.cluster.replica.owner import PREV_HEADER
from app.cluster.replica.snapshot import (
    SNAPSHOT_MIN_BYTES,
    SNAPSHOT_RECORDS,
    put,
    restore,
    take,
)
from storage import keys
from storage.errors import CorruptRecordError
from storage.keys import CHANGELOG_EPOCH_KEY, CHANGELOG_SEQ_KEY, OWNED_MARK_KEY, read_u64, u64
from storage.store import CF, Put, RocksStore

log = logging.getLogger("rocktimer.cluster")

APPLY_BATCH = 512  # records written as one WriteBatch at most (rebuild: bigger is faster)
POLL_S = 0.25  # how often the reader looks whether it was told to stop
PENDING_LIMIT = 4096  # records buffered by the subscription
PENDING_BYTES = 64 * 1024 * 1024  # and their bytes (past either, the consumer starts again)
RESUBSCRIBE_S = 0.5  # after a failed read or write, before reading again

Item = tuple[int, int | None, bytes]  # a record: its seq, the seq before it, its data


class Gap(Exception):
    """Records are missing before this one: the copy must be restored from the snapshot."""


class Standby:
    def __init__(
        self,
        bus: Bus,
        k: int,
        path: str,
        *,
        memory_share: int = 1,
        snapshot_every: int = SNAPSHOT_RECORDS,
        snapshot_min_bytes: int = SNAPSHOT_MIN_BYTES,
    ) -> None:
        self.bus = bus
        self.k = k
        self.path = path
        self.memory_share = memory_share
        self.snapshot_every = snapshot_every
        self.snapshot_min_bytes = snapshot_min_bytes
        self._open()
        self.records_applied = 0
        self.closed = False
        self.snapshots = 0
        self.restores = 0
        self._since_snapshot = 0
        self._bytes_since_snapshot = 0
        self.snapshot_bytes = 0  # the size of the last snapshot stored from here
        self._uploading: concurrent.futures.Future[int] | None = None
        self.corrupt = 0
        self.errors = 0
        self._parts: list[bytes] = []  # a P... run waiting for its L
        self._parts_from = 0  # the seq applied before that run
        self._cond = threading.Condition()
        self._stop = asyncio.Event()
        self._task = bus.submit(self._follow())

    def _open(self) -> None:
        self.store = RocksStore(self.path, memory_share=self.memory_share)
        raw = self.store.get(CF.META, CHANGELOG_SEQ_KEY)
        self.applied = read_u64(raw) if raw else 0  # the seq this copy holds up to
        raw = self.store.get(CF.META, CHANGELOG_EPOCH_KEY)
        self.epoch = read_u64(raw) if raw else 0  # the last fence's

    @property
    def owned_mark(self) -> bool:
        """An owner wrote to this copy (see keys.OWNED_MARK_KEY)."""
        return self.store.get(CF.META, OWNED_MARK_KEY) is not None

    @property
    def has_secret(self) -> bool:
        return self.store.get(CF.META, keys.RECEIPT_SECRET_KEY) is not None

    def wait_applied(self, seq: int, timeout_s: float) -> bool:
        """Block until the copy holds the changelog up to ``seq``; whether it does."""
        with self._cond:
            return self._cond.wait_for(lambda: self.applied >= seq, timeout_s)

    async def _follow(self) -> None:
        """Read and apply until stopped; after any error, log it and subscribe again from
        the seq after the one applied (a standby that stopped reading is no standby)."""
        while not self._stop.is_set():
            try:
                try:
                    await self._read()
                except Gap as gap:
                    log.warning("standby p%d: %s: restoring the snapshot", self.k, gap)
                    await asyncio.to_thread(self._restore)
            except Exception as exc:
                self.errors += 1
                if self._parts:  # read the unfinished run again
                    self._parts.clear()
                    self.applied = self._parts_from
                log.warning("standby p%d: %s; reading again from %d", self.k, exc, self.applied + 1)
                await asyncio.sleep(RESUBSCRIBE_S)

    async def _read(self) -> None:
        sub = await self.bus.js.subscribe(
            subject(self.k),
            ordered_consumer=True,
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self.applied + 1
            ),
            pending_msgs_limit=PENDING_LIMIT,
            pending_bytes_limit=PENDING_BYTES,
        )
        try:
            while not self._stop.is_set():
                batch = await self._take(sub)
                if batch:
                    await asyncio.to_thread(self._apply, batch)
        finally:
            try:
                await sub.unsubscribe()
            except Exception as exc:  # the connection is gone: nothing to unsubscribe
                log.debug("standby p%d unsubscribe: %s", self.k, exc)

    async def _take(self, sub: Subscription) -> list[Item]:
        try:
            msg = await sub.next_msg(timeout=POLL_S)
        except nats.errors.TimeoutError:
            return []
        msgs = [msg]
        while sub.pending_msgs > 0 and len(msgs) < APPLY_BATCH:
            msgs.append(await sub.next_msg(timeout=POLL_S))
        return [(m.metadata.sequence.stream, _prev(m.headers), m.data) for m in msgs]

    def _apply(self, batch: list[Item]) -> None:
        """Write these records (in seq order) and the seq they reach, as one batch; then
        a snapshot, if one is due. Gap if records are missing before one of them (what
        came before it is written first)."""
        commits: list[Commit] = []
        epoch = self.epoch
        last = self.applied
        gap: Gap | None = None
        for seq, prev, data in batch:
            if seq <= last:  # delivered again (the consumer was reset): already here
                continue
            if prev is not None and prev != last:
                gap = Gap(f"record {seq} follows {prev}, the copy holds up to {last}")
                break
            kind = data[:1]
            try:
                if kind == COMMITS:
                    commits.extend(decode_commits(memoryview(data)[1:]))
                elif kind == PART:
                    if not self._parts:
                        self._parts_from = last
                    self._parts.append(data[1:])
                elif kind == LAST_PART:
                    body = b"".join([*self._parts, data[1:]])
                    self._parts.clear()
                    commits.extend(decode_commits(body))
                elif kind == FENCE:
                    self._parts.clear()  # an unfinished run: its owner was deposed
                    fence = decode_fence(data)
                    commits.extend(decode_commits(fence.body))
                    epoch = fence.epoch
                else:
                    raise CorruptRecordError(f"unknown changelog record kind {kind!r}")
            except CorruptRecordError as exc:
                self.corrupt += 1
                log.error("standby p%d: record %d skipped: %s", self.k, seq, exc)
            last = seq
        if last != self.applied:
            self._write(commits, last, epoch)
        self.records_applied += len(batch)
        if gap is not None:
            raise gap
        self._since_snapshot += len(batch)
        self._bytes_since_snapshot += sum(len(data) for _, _, data in batch)
        due = self._since_snapshot >= self.snapshot_every or self._bytes_since_snapshot >= max(
            self.snapshot_min_bytes, self.snapshot_bytes
        )
        if due and not self._parts:
            self._snapshot()

    def _write(self, commits: list[Commit], last: int, epoch: int) -> None:
        stored = self._parts_from if self._parts else last  # a restart reads the run again
        self.store.write_commits(
            commits,
            [
                Put(CF.META, CHANGELOG_SEQ_KEY, u64(stored)),
                Put(CF.META, CHANGELOG_EPOCH_KEY, u64(epoch)),
            ],
            sync=False,
        )
        with self._cond:
            self.applied = last
            self.epoch = epoch
            self._cond.notify_all()

    def _snapshot(self) -> None:
        """Checkpoint the copy here (quick: the reader waits for it), pack and upload it in
        the background (the reader goes on)."""
        if self._uploading is not None and not self._uploading.done():
            return  # the last one is still on its way: the next batch tries again
        self._since_snapshot = self._bytes_since_snapshot = 0
        work = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(self.path)), prefix=".snap-")
        try:
            checkpoint = take(self.store, work)
        except Exception:
            shutil.rmtree(work, ignore_errors=True)
            raise
        self._uploading = self.bus.submit(put(self.bus, self.k, checkpoint, self.applied, work))

        def done(future: concurrent.futures.Future[int]) -> None:
            shutil.rmtree(work, ignore_errors=True)
            failed = None if future.cancelled() else future.exception()
            if failed is not None:
                log.warning("p%d: snapshot not stored (the next one retries): %s", self.k, failed)
            elif not future.cancelled():
                self.snapshot_bytes = future.result()
                self.snapshots += 1

        self._uploading.add_done_callback(done)

    def _restore(self) -> None:
        """Replace the copy with the stored snapshot (a gap: its records were purged). If
        that fails, the copy is left empty (read again from the first record: the gap
        comes back and the restore is tried again)."""
        self.store.close()
        shutil.rmtree(self.path, ignore_errors=True)
        try:
            restore(self.bus, self.k, self.path)
            self.restores += 1
        finally:
            self._parts.clear()
            with self._cond:
                self._open()
                self._cond.notify_all()

    def stop(self) -> None:
        """Stop reading (the store stays open)."""
        self.bus.loop.call_soon_threadsafe(self._stop.set)
        deadline = time.monotonic() + 10
        while not self._task.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._task.done():
            self._task.cancel()

    def close(self) -> None:
        self.closed = True
        self.stop()  # a snapshot on its way goes on: it reads its own files, not the store
        self.store.close()


def _prev(headers: dict[str, str] | None) -> int | None:
    value = (headers or {}).get(PREV_HEADER)
    return int(value) if value is not None and value.isdigit() else None
