"""The owner's side of one partition: its lease in KV and its changelog appends.

The lease: key ``p<k>`` of the owners' bucket (TTL = the lease), renewed every lease/4 by
``update(last=revision)``. Its deadline is kept on this process's monotonic clock from the
moment each renewal was *sent*, so it ends before the servers' TTL does: past it, the
partition answers nothing (``refusal``), even before this process learns whether another
node took over (a SIGSTOP, a partitioned node). If the key expired and nobody else took it,
the owner takes it again, and serves again only if the changelog did not move meanwhile.

The appends: one record in flight per partition, each with
``Nats-Expected-Last-Subject-Sequence`` = the seq of its previous record, so that after
another node's fence every append of this one is refused: then it is deposed, refuses
every batch, fails every reply still waiting and calls ``on_deposed``. Commits that arrive
while a record is in flight go together into the next one. A record whose ack was lost is
sent again with the same ``Nats-Msg-Id``: the stream answers a duplicate with the first
one's seq.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence

import nats.js.errors
from nats.js.api import Header

from app.cluster.replica.bus import API_TIMEOUT_S, STREAM, Bus, subject
from app.cluster.replica.codec import Staged, encode_commits, split
from storage.errors import PartitionUnavailable
from storage.store import DeleteRange
from workers.histogram import Histogram

log = logging.getLogger("rocktimer.cluster")

WRONG_LAST_SEQUENCE = (10071, 10164)  # JSStreamWrongLastSequence(Constant)Err
NODE_HEADER = "Rocktimer-Node"  # every record says which node appended it
EPOCH_HEADER = "Rocktimer-Epoch"  # and under which ownership (the fence's epoch)
PREV_HEADER = "Rocktimer-Prev"  # and the seq of the record before it (snapshot.py: gaps)
DEPOSED = "partition p{k} is not served right now: this node no longer owns it; retry"
LAPSED = "partition p{k} is not served right now: its owner's lease is being renewed; retry"
RETRY_S = 0.1  # between attempts of an append or a renewal NATS did not answer
LOG_EVERY = 20  # attempts of one append between two log lines about it
CLOSE_FLUSH_S = 10.0  # a clean stop waits this long for the last records' acks
APPEND_BOUNDS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5)


def lease_key(k: int) -> str:
    return f"p{k}"


async def last_seq(bus: Bus, k: int) -> int:
    """The stream seq of partition k's last record, 0 if it has none."""
    try:
        msg = await bus.js.get_last_msg(STREAM, subject(k))
    except nats.js.errors.NotFoundError:
        return 0
    return int(msg.seq or 0)


async def publish(
    bus: Bus,
    k: int,
    payload: bytes,
    *,
    expected: int,
    msg_id: str,
    writer: tuple[str, int],
    give_up: Callable[[], bool],
) -> int | None:
    """Append one record after ``expected``; its seq, or None if refused (another record is
    there: deposed). Retried, same msg id, until NATS answers or ``give_up()``
    (then PartitionUnavailable). ``writer``: this node's id and its epoch (headers).

    A refusal is believed only once the subject is seen to hold a record after
    ``expected``. The stream's leader also refuses an append it cannot check yet (10164)
    while the record before is still in process there: it sends that record's ack a
    moment before it clears the mark, so the next append can arrive in between. Taken for
    a fence, such a refusal would depose an owner nobody replaced."""
    headers = {
        Header.MSG_ID.value: msg_id,
        Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(expected),
        NODE_HEADER: writer[0],
        EPOCH_HEADER: str(writer[1]),
        PREV_HEADER: str(expected),
    }
    attempt = 0
    while True:
        try:
            ack = await bus.js.publish(
                subject(k), payload, timeout=API_TIMEOUT_S, headers=dict(headers)
            )
            return int(ack.seq)
        except nats.js.errors.APIError as exc:
            if exc.err_code in WRONG_LAST_SEQUENCE and await _moved_on(bus, k, expected):
                log.warning("changelog append to p%d after seq %d refused: %s", k, expected, exc)
                return None
            failure: object = exc
        except Exception as exc:  # timeouts, no responders, reconnecting
            failure = exc or type(exc).__name__
        if attempt % LOG_EVERY == 0:
            log.warning("changelog append to p%d not acknowledged (%s); retrying", k, failure)
        attempt += 1
        if give_up():
            raise PartitionUnavailable(DEPOSED.format(k=k))
        await asyncio.sleep(RETRY_S)


async def _moved_on(bus: Bus, k: int, expected: int) -> bool:
    """Whether the subject holds a record after ``expected`` (its leader says so); not
    known (NATS not answering) counts as not yet: the append is tried again."""
    try:
        return await last_seq(bus, k) > expected
    except Exception as exc:
        log.warning("p%d: the changelog's last seq not answered (%s)", k, exc or type(exc))
        return False


class Lease:
    """This node's lease on partition k, renewed on the bus's loop from ``start``."""

    def __init__(self, bus: Bus, k: int, value: bytes, revision: int, sent_at: float) -> None:
        self.bus = bus
        self.k = k
        self.key = lease_key(k)
        self.value = value
        self.revision = revision
        self.lease_s = bus.lease_ms / 1000
        self.deadline = sent_at + self.lease_s  # monotonic
        self.lost: str | None = None  # why another node has it now
        self.last_seq: Callable[[], int | None] = lambda: None  # see Changelog
        self.on_lost: Callable[[str], None] = lambda why: None  # see Changelog
        self._task: asyncio.Task[None] | None = None

    @property
    def valid(self) -> bool:
        return self.lost is None and time.monotonic() < self.deadline

    @classmethod
    async def acquire(cls, bus: Bus, k: int, value: bytes, timeout_s: float) -> Lease | None:
        """The lease if nobody holds it (created now), else None. NATS not answering (the
        bucket's leader being elected) is retried for ``timeout_s``."""
        give_up_at = time.monotonic() + timeout_s
        while True:
            sent = time.monotonic()
            try:
                revision = await bus.owners.create(lease_key(k), value)
                break
            except (nats.js.errors.KeyWrongLastSequenceError, nats.js.errors.KeyNotFoundError):
                # held; or it expired just as create looked (nats-py's create then reads it)
                return None
            except Exception as exc:  # no responders, a timeout: not an answer
                if time.monotonic() > give_up_at:
                    raise
                log.warning("lease of p%d not answered (%s); retrying", k, exc or type(exc))
                await asyncio.sleep(RETRY_S)
        lease = cls(bus, k, value, revision, sent)
        lease._task = asyncio.get_running_loop().create_task(lease._renew_forever())
        return lease

    async def _renew_forever(self) -> None:
        """Renew every lease/4 until lost or released. Nothing ends this loop but that:
        whatever a renewal or a retake raises (NATS electing a leader, unreachable), the
        deadline runs on and the next tick tries again."""
        failures = 0
        while self.lost is None:
            await asyncio.sleep(self.lease_s / 4)
            sent = time.monotonic()
            try:
                await self._renew(sent)
                failures = 0
            except Exception as exc:
                if failures % LOG_EVERY == 0:
                    log.warning("lease of p%d not renewed: %s", self.k, exc or type(exc))
                failures += 1

    async def _renew(self, sent: float) -> None:
        try:
            self.revision = await self.bus.owners.update(self.key, self.value, last=self.revision)
            self.deadline = sent + self.lease_s
        except nats.js.errors.KeyWrongLastSequenceError:
            await self._retake(sent)

    async def _retake(self, sent: float) -> None:
        """The key changed under us: another node holds it (lost), or it expired."""
        try:
            entry = await self.bus.owners.get(self.key)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            # expired (or released): nobody holds it
            entry = None
        if entry is not None:
            if _token(entry.value) == _token(self.value) and entry.revision is not None:
                # our own renewal landed (its ack was lost)
                self.revision = entry.revision
                self.deadline = sent + self.lease_s
            else:
                self._lose("another node holds its lease")
            return
        ours = self.last_seq()
        if ours is None:  # a record is in flight: its outcome decides; try again next tick
            return
        try:
            revision = await self.bus.owners.create(self.key, self.value)
        except (nats.js.errors.KeyWrongLastSequenceError, nats.js.errors.KeyNotFoundError):
            return  # taken meanwhile (or expiring as it looked): the next tick finds out
        if await last_seq(self.bus, self.k) != ours:
            self._lose("its changelog moved on while its lease had lapsed")
            return
        self.revision = revision
        self.deadline = sent + self.lease_s
        log.warning("lease of p%d taken again after it had lapsed", self.k)

    def _lose(self, why: str) -> None:
        self.lost = why
        self.on_lost(why)

    async def release(self) -> None:
        """Stop renewing and delete the key, so that another node need not wait the TTL."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self.lost is None:
            with contextlib.suppress(Exception):
                await self.bus.owners.delete(self.key, last=self.revision)
        self.lost = self.lost or "released"

    def stop_renewing(self) -> None:
        if self._task is not None:
            self._task.cancel()


_Pending = tuple[Sequence[DeleteRange], Staged, "concurrent.futures.Future[int]"]


class Changelog:
    """The owner's appends of partition k (workers/writer.py's Changelog)."""

    def __init__(
        self,
        bus: Bus,
        k: int,
        lease: Lease,
        *,
        last_seq: int,
        node: str,
        epoch: int,
        on_deposed: Callable[[int], None],
    ) -> None:
        self.bus = bus
        self.k = k
        self.lease = lease
        self.last = last_seq  # the seq of this partition's last record (ours)
        self.on_deposed = on_deposed
        self.writer = (node, epoch)
        self.deposed: str | None = None
        self.records = 0  # records sent (each part of a large body is one)
        self.appends = 0  # commits appended
        self.append_seconds = Histogram(APPEND_BOUNDS_S)  # a record's publish to its ack
        self._lock = threading.Lock()
        self._pending: list[_Pending] = []
        self._flushing = False
        self._token = uuid.uuid4().hex[:16]
        lease.last_seq = lambda: None if self._flushing else self.last
        lease.on_lost = self._depose

    # --- the writer's side (workers/writer.py Changelog) --------------------------------

    def refusal(self) -> Exception | None:
        if self.deposed is not None:
            return PartitionUnavailable(DEPOSED.format(k=self.k))
        if not self.lease.valid:
            return PartitionUnavailable(LAPSED.format(k=self.k))
        return None

    def append(
        self, ranges: Sequence[DeleteRange], staged: Staged
    ) -> concurrent.futures.Future[int]:
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        with self._lock:
            if self.deposed is not None:
                future.set_exception(PartitionUnavailable(DEPOSED.format(k=self.k)))
                return future
            self._pending.append((ranges, staged, future))
            self.appends += 1
            if self._flushing:
                return future
            self._flushing = True
        self.bus.loop.call_soon_threadsafe(self._start_flush)
        return future

    # --- on the bus's loop ---------------------------------------------------------------

    def _start_flush(self) -> None:
        self.bus.loop.create_task(self._flush())

    async def _flush(self) -> None:
        while True:
            with self._lock:
                taken, self._pending = self._pending, []
                if not taken or self.deposed is not None:
                    self._flushing = False
                    self._fail(taken)
                    return
            try:
                body = encode_commits([(r, s) for r, s, _ in taken])
                seq: int | None = self.last
                for payload in split(body, self.bus.max_record_bytes):
                    seq = await self._append(payload)
                    if seq is None:
                        break
                    self.last = seq
            except Exception as exc:  # gave up (lease lost) or could not encode
                log.warning("changelog of p%d: %s", self.k, exc)
                seq = None
            if seq is None:
                self._depose("its changelog append was refused: another node took it over")
                self._fail(taken)
                continue
            for _, _, future in taken:
                future.set_result(seq)

    async def _append(self, payload: bytes) -> int | None:
        self.records += 1
        started = time.perf_counter()
        seq = await publish(
            self.bus,
            self.k,
            payload,
            expected=self.last,
            msg_id=f"{self._token}-{self.records}",
            writer=self.writer,
            give_up=lambda: self.lease.lost is not None or self.deposed is not None,
        )
        self.append_seconds.observe(time.perf_counter() - started)
        return seq

    def _fail(self, taken: list[_Pending]) -> None:
        for _, _, future in taken:
            if not future.done():
                future.set_exception(PartitionUnavailable(DEPOSED.format(k=self.k)))

    def _depose(self, why: str) -> None:
        with self._lock:
            if self.deposed is not None:
                return
            self.deposed = why
            pending, self._pending = self._pending, []
        self.lease.stop_renewing()
        self._fail(pending)
        log.warning("partition p%d deposed: %s", self.k, why)
        threading.Thread(
            target=self.on_deposed, args=(self.k,), name=f"rocktimer-deposed-p{self.k}", daemon=True
        ).start()

    # --- a clean stop --------------------------------------------------------------------

    def close(self) -> None:
        """After the engine stopped: wait for the last records' acks, give the lease up."""
        deadline = time.monotonic() + CLOSE_FLUSH_S
        while self._flushing and self.deposed is None and time.monotonic() < deadline:
            time.sleep(0.01)
        with contextlib.suppress(Exception):
            self.bus.call(self.lease.release(), API_TIMEOUT_S * 2)


def owner_value(node: str, advertise: str, epoch: int, token: str) -> bytes:
    """A lease's value: who owns the partition, where it answers, under which epoch, and
    the token of this one lease (another lease of the same node is not this one)."""
    return json.dumps(
        {"node": node, "advertise": advertise, "epoch": epoch, "token": token}
    ).encode()


def _token(value: bytes | None) -> str | None:
    try:
        token = json.loads(value or b"{}").get("token")
    except (ValueError, AttributeError):
        return None
    return token if isinstance(token, str) else None
