"""A standby: partition k's copy on a node that does not own it, kept up with the changelog.

It reads ``rocktimer.changelog.<k>`` through a pull consumer of its own, from the seq after
the one its copy holds: it fetches a batch, writes it as one WriteBatch
(``RocksStore.write_commits``) with the seq applied in that same batch, and only then
fetches the next. So a standby slower than its owner (a burst, a busy disk) leaves the
records waiting in the stream, never in a client buffer that overflows: nothing is dropped
between the stream and the copy. A crash keeps both the records and their seq or neither,
and the next start reads on from there. An empty copy is rebuilt from the stream (from the
latest snapshot, if there is one: snapshot.py). Every so many records applied (snapshot.py
says when) it stores a snapshot of its copy and purges the records below it.

Every record names the seq of the record before it (``Rocktimer-Prev``), and a record is
applied only right after that one: never over a gap, never out of order. If records are
missing before one it was handed, the copy keeps what it holds and the standby reads again
from the seq after it. If the stream itself no longer has them (purged below a snapshot
while this copy was away: the first record a new consumer hands over already follows a
gap), it restores the snapshot, which holds them, and reads on from there.
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

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from app.cluster.replica.bus import API_TIMEOUT_S, STREAM, Bus, subject
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
    latest_seq,
    put,
    restore,
    take,
)
from storage import keys
from storage.errors import CorruptRecordError
from storage.keys import CHANGELOG_EPOCH_KEY, CHANGELOG_SEQ_KEY, OWNED_MARK_KEY, read_u64, u64
from storage.store import CF, Put, RocksStore

log = logging.getLogger("rocktimer.cluster")

FETCH_RECORDS = 512  # records fetched (and written as one WriteBatch) at most: rebuild speed
FETCH_BYTES = 64 * 1024 * 1024  # about as many bytes of records at most (fewer when large)
POLL_S = 0.25  # a fetch waits this long for records (and the reader sees a stop this often)
IDLE_CHECK_S = 2.0  # a reader handed nothing this long asks whether its consumer still exists
CONSUMER_IDLE_S = 30.0  # the servers drop a reader's consumer once unused this long (node gone)
RESUBSCRIBE_S = 0.5  # after a failed read or write, before reading again
NO_SNAPSHOT_S = 5.0  # records missing from the stream and no snapshot holding them: retry

Item = tuple[int, int | None, bytes]  # a record: its seq, the seq before it, its data


class Gap(Exception):
    """Records are missing before this one: none of it is applied."""

    def __init__(self, seq: int, prev: int, applied: int, *, first: bool) -> None:
        super().__init__(f"record {seq} follows {prev}, the copy holds up to {applied}")
        self.prev = prev
        self.first = first  # the first record a new consumer handed over: the stream lacks them


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
        self._fetch_records = FETCH_RECORDS  # the next fetch's size (see _fetch)
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
        """Read and apply until stopped; after any error, log it and read again from the
        seq after the one applied (a standby that stopped reading is no standby)."""
        while not self._stop.is_set():
            try:
                try:
                    await self._read()
                except Gap as gap:
                    if gap.first:  # gone from the stream: only a snapshot holds them
                        await asyncio.to_thread(self._restore, gap)
                    else:  # lost on the way here: the stream has them, read them again
                        log.warning(
                            "standby p%d: %s: reading again from %d",
                            self.k,
                            gap,
                            self._rewind() + 1,
                        )
            except Exception as exc:
                self.errors += 1
                log.warning(
                    "standby p%d: %s; reading again from %d", self.k, exc, self._rewind() + 1
                )
                await asyncio.sleep(RESUBSCRIBE_S)

    def _rewind(self) -> int:
        """Back to the seq the copy holds on disk (an unfinished P... run is read again);
        that seq."""
        if self._parts:
            self._parts.clear()
            with self._cond:
                self.applied = self._parts_from
        return self.applied

    async def _read(self) -> None:
        """One consumer from the seq after the one applied: fetch, apply, fetch again."""
        self._rewind()
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self.applied + 1,
            ack_policy=AckPolicy.NONE,  # its position is the copy's seq, not the server's
            inactive_threshold=CONSUMER_IDLE_S,
            mem_storage=True,
            num_replicas=1,
        )
        sub = await self.bus.js.pull_subscribe(subject(self.k), stream=STREAM, config=config)
        first = True
        handed_at = time.monotonic()
        try:
            while not self._stop.is_set():
                batch = await self._fetch(sub)
                if batch:
                    handed_at = time.monotonic()
                    await asyncio.to_thread(self._apply, batch, first)
                    first = False
                elif time.monotonic() - handed_at > IDLE_CHECK_S:
                    # a consumer lost with its server hands nothing: NotFound, read again
                    await sub.consumer_info()
                    handed_at = time.monotonic()
        finally:
            try:
                await sub.unsubscribe()
                if config.name:
                    await self.bus.js.delete_consumer(STREAM, config.name)
            except Exception as exc:  # the connection or the consumer is gone already
                log.debug("standby p%d unsubscribe: %s", self.k, exc)

    async def _fetch(self, sub: JetStreamContext.PullSubscription) -> list[Item]:
        """The next records, in seq order: as many as are there, up to the batch size
        (FETCH_RECORDS, fewer when records are large: about FETCH_BYTES); [] if none came
        within POLL_S."""
        try:
            msgs = await sub.fetch(self._fetch_records, timeout=POLL_S)
        except TimeoutError:  # nats-py says "no records yet" so (nats.errors.TimeoutError)
            return []
        size = sum(len(m.data) for m in msgs)
        self._fetch_records = max(1, min(FETCH_RECORDS, FETCH_BYTES * len(msgs) // max(1, size)))
        return [(m.metadata.sequence.stream, _prev(m.headers), m.data) for m in msgs]

    def _apply(self, batch: list[Item], first: bool = False) -> None:
        """Write these records (in seq order) and the seq they reach, as one batch; then
        a snapshot, if one is due. Gap if records are missing before one of them (what
        came before it is written first); ``first``: the batch is the first a new consumer
        handed over."""
        commits: list[Commit] = []
        epoch = self.epoch
        last = self.applied
        gap: Gap | None = None
        for i, (seq, prev, data) in enumerate(batch):
            if seq <= last:  # delivered again: already here
                continue
            if prev is not None and prev != last:
                gap = Gap(seq, prev, last, first=first and i == 0)
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

    def _restore(self, gap: Gap) -> None:
        """Replace the copy with the stored snapshot: the stream no longer has the records
        before the one after ``gap`` (purged below a snapshot while this copy was away).
        A snapshot that does not reach them (none, or older) would not help: the copy is
        kept, and read again later (an error: records were lost from the stream). If the
        restore fails, the copy is left empty (read again from the first record: the gap
        comes back and the restore is tried again)."""
        stored = self.bus.call(latest_seq(self.bus, self.k), API_TIMEOUT_S * 3)
        if stored < gap.prev:
            log.error(
                "standby p%d: %s, and no snapshot holds the records before it (the latest "
                "is at %d): keeping the copy, reading again in %.0f s",
                self.k,
                gap,
                stored,
                NO_SNAPSHOT_S,
            )
            time.sleep(NO_SNAPSHOT_S)
            return
        log.warning("standby p%d: %s: restoring the snapshot at %d", self.k, gap, stored)
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
