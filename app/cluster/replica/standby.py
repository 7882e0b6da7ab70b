"""A standby: partition k's copy on a node that does not own it, kept up with the changelog.

It reads ``rocktimer.changelog.<k>`` with an ordered consumer from the seq after the one
its copy holds, and writes each run of records that arrived together as one WriteBatch
(``RocksStore.write_commits``), with the seq applied in that same batch: a crash keeps both
or neither, and the next start reads on from there. An empty copy is rebuilt from the
stream's first record.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import nats.errors
from nats.aio.subscription import Subscription
from nats.js.api import ConsumerConfig, DeliverPolicy

from app.cluster.replica import codec
from app.cluster.replica.bus import Bus, subject
from storage import keys
from storage.errors import CorruptRecordError
from storage.keys import CHANGELOG_EPOCH_KEY, CHANGELOG_SEQ_KEY, OWNED_MARK_KEY, read_u64, u64
from storage.store import CF, Put, RocksStore

log = logging.getLogger("rocktimer.cluster")

APPLY_BATCH = 512  # records written as one WriteBatch at most (rebuild: bigger is faster)
POLL_S = 0.25  # how often the reader looks whether it was told to stop
PENDING_LIMIT = 4096  # records buffered by the subscription
RESUBSCRIBE_S = 0.5  # after a failed read or write, before reading again


class Standby:
    def __init__(self, bus: Bus, k: int, path: str, *, memory_share: int = 1) -> None:
        self.bus = bus
        self.k = k
        self.store = RocksStore(path, memory_share=memory_share)
        raw = self.store.get(CF.META, CHANGELOG_SEQ_KEY)
        self.applied = read_u64(raw) if raw else 0  # the seq this copy holds up to
        raw = self.store.get(CF.META, CHANGELOG_EPOCH_KEY)
        self.epoch = read_u64(raw) if raw else 0  # the last fence's
        self.records_applied = 0
        self.corrupt = 0
        self.errors = 0
        self._parts: list[bytes] = []  # a P... run waiting for its L
        self._parts_from = 0  # the seq applied before that run
        self._cond = threading.Condition()
        self._stop = asyncio.Event()
        self._task = bus.submit(self._follow())

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
                await self._read()
            except Exception as exc:
                self.errors += 1
                if self._parts:  # read the unfinished run again
                    self._parts.clear()
                    self.applied = self._parts_from
                log.error("standby p%d: %s; reading again from %d", self.k, exc, self.applied + 1)
                await asyncio.sleep(RESUBSCRIBE_S)

    async def _read(self) -> None:
        sub = await self.bus.js.subscribe(
            subject(self.k),
            ordered_consumer=True,
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self.applied + 1
            ),
            pending_msgs_limit=PENDING_LIMIT,
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

    async def _take(self, sub: Subscription) -> list[tuple[int, bytes]]:
        try:
            msg = await sub.next_msg(timeout=POLL_S)
        except nats.errors.TimeoutError:
            return []
        msgs = [msg]
        while sub.pending_msgs > 0 and len(msgs) < APPLY_BATCH:
            msgs.append(await sub.next_msg(timeout=POLL_S))
        return [(m.metadata.sequence.stream, m.data) for m in msgs]

    def _apply(self, batch: list[tuple[int, bytes]]) -> None:
        """Write these records (in seq order) and the seq they reach, as one batch."""
        commits: list[codec.Commit] = []
        epoch = self.epoch
        last = self.applied
        for seq, data in batch:
            if seq <= last:  # delivered again (the consumer was reset): already here
                continue
            kind = data[:1]
            try:
                if kind == codec.COMMITS:
                    commits.extend(codec.decode_commits(memoryview(data)[1:]))
                elif kind == codec.PART:
                    if not self._parts:
                        self._parts_from = last
                    self._parts.append(data[1:])
                elif kind == codec.LAST_PART:
                    body = b"".join([*self._parts, data[1:]])
                    self._parts.clear()
                    commits.extend(codec.decode_commits(body))
                elif kind == codec.FENCE:
                    self._parts.clear()  # an unfinished run: its owner was deposed
                    fence = codec.decode_fence(data)
                    commits.extend(codec.decode_commits(fence.body))
                    epoch = fence.epoch
                else:
                    raise CorruptRecordError(f"unknown changelog record kind {kind!r}")
            except CorruptRecordError as exc:
                self.corrupt += 1
                log.error("standby p%d: record %d skipped: %s", self.k, seq, exc)
            last = seq
        if last == self.applied:
            return
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
            self.records_applied += len(batch)
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
        self.stop()
        self.store.close()
