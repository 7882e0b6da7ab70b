"""The writer: the one place that mutates RocksDB, with group commit.

Requests queue up as ops (a function of a Txn). The writer takes every op waiting, runs
each against one Txn and writes the Txn as one WriteBatch; ops that need no fsync are
answered then, durable ones once the Syncer has fsynced the WAL behind it (and, for a
replicated partition in cluster mode, once the Changelog has the batch acknowledged: every
batch is appended to it, and none is written once it refuses). Checks that
must see the latest state (duplicate msg_id, cancelled, receipt valid) run inside the
ops, here. Batches are written one at a time under a lock: by the writer thread, or, for
an op submitted ``inline`` while the writer thread is idle, by the submitting thread, which
then also takes one unit of the receives and acks that queued behind it meanwhile (the
writer thread is not woken for those: two hand-offs fewer for a consumer's op that found
the deliverer's move being written).

Clients' ops wait in a bounded queue: when it is full, ``submit`` raises ``Overloaded``
(HTTP 429). Internal ops (moves of due timers) have their own small queue and block the
deliverer instead, which in turn blocks the scanner: back-pressure end to end.

Deliveries first: a move never waits behind more than one unit of client work, the batch
being written when it arrives (at most ``GROUP_COMMIT_MAX_ITEMS`` messages, or one op).
Moves are taken before any client op; client ops queued behind a waiting move stay queued
(an op that would have run inline queues instead, and the writer thread puts back what it
took but did not start); once the writer thread has work in hand, no op runs inline in
front of it; and when a batch ends while the scanner waits for it to see a due timer, the
writer keeps the next slot for that timer's move (MOVE_HANDOFF_S at most). One exception:
after a move, one waiting unit of receives or acks (the last leg of a delivery) goes before
the next move, so that consumers are not held behind an endless chain of moves while timers
fall due back to back; sends are.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from storage.errors import (
    DiskFullError,
    Overloaded,
    PartitionUnavailable,
    RocktimerError,
    StorageError,
    WriterStopped,
)
from storage.keys import PENDING_KEY, read_u64
from storage.store import CF, DeleteRange, RocksStore
from storage.txn import Txn
from workers.clock import Clock
from workers.histogram import Histogram
from workers.thread import OwnThread

log = logging.getLogger("rocktimer.writer")

T = TypeVar("T")

GROUP_COMMIT_MAX_ITEMS = 256  # messages per client batch (an op weighs its messages): bounds
# how long a move of due timers can wait behind client work. A batch send comes in parts of
# at most this many (submit_parts): a whole batch send of 1000 as one unit kept a move
# waiting for all of it
CONSUME_WEIGHT = 2  # a message received or acked weighs as much as this many sent: ~9-12 µs
# of the writer against a send's ~6-8 (receive and ack make their writes per op); one
# receive of 1000 or one ack of 800 receipts as a single op held the scan horizon 25-35 ms
CONSUME_PART = GROUP_COMMIT_MAX_ITEMS // CONSUME_WEIGHT  # messages per receive / ack op
DRAIN_TURNS = 3  # units of draining work (receive/ack parts) taken per unit of sends when
# both wait (at 1, a consumer of due timers fell seconds behind a producer)
INTERNAL_QUEUE = 4  # moves waiting for the writer; more only adds memory, not speed
MOVE_HANDOFF_S = 0.005  # longest the writer holds client work back for a due timer the
# scanner could not scan until the last batch ended (its scan and the deliverer's hand-off
# take well under a millisecond; without the wait, the next client batch went first)
CALL_POLL_S = 1.0  # how often a waiting worker checks that the writer is still alive
DISK_CHECK_MS = 50  # statvfs at most this often (it was 4% of the writer under load);
# the reserve (min_free_bytes) covers what can be written in between
REOPEN_BACKOFF_MS = 500  # between attempts to reopen a store whose write failed
DISK_FULL_DETAIL = "the disk is nearly full: new messages are refused until space is freed"
BROKEN_STORE_DETAIL = "the store cannot write at the moment (disk full or I/O error)"
BATCH_OPS_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, GROUP_COMMIT_MAX_ITEMS)
FSYNC_BOUNDS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
CHANGELOG_WAIT_S = 60.0  # longest a durable reply waits for its changelog record's ack: the
# changelog itself fails its appends once its lease deadline passes (a few seconds); this
# only bounds the wait should it not
CHANGELOG_LOST = "the partition is not served right now: its changelog did not answer; retry"


class Changelog(Protocol):
    """Where a replicated partition's commits go besides its own store (cluster mode,
    app/cluster/replica/). Every batch written is appended, in commit order; a durable
    op is answered once the record holding its batch is acknowledged, as well as fsynced."""

    records: int  # records appended so far (/metrics)
    append_seconds: Histogram  # each record's publish to its ack (/metrics)

    def refusal(self) -> Exception | None:
        """Why no batch may be written now (this node no longer owns the partition), or
        None. Checked before each batch: a deposed owner writes nothing more."""

    def append(
        self, ranges: Sequence[DeleteRange], staged: dict[str, dict[bytes, bytes | None]]
    ) -> concurrent.futures.Future[int]:
        """Queue one committed batch (the arguments of its ``write_staged``); the future
        completes with the changelog seq of the record that holds it, or fails."""


class _Loop(OwnThread, abc.ABC):
    """A thread running ``_run``, woken through one Condition, stopped by a flag that
    ``_run`` checks under it (the writer and its syncer)."""

    thread_name = "rocktimer-loop"

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()
        self._running = False

    def start(self) -> None:
        self._running = True
        self._spawn(self._run, self.thread_name)

    def stop(self) -> None:
        """``_run`` finishes what it was handed, then returns."""
        with self._cond:
            self._running = False
            self._cond.notify_all()
        self._join()

    @abc.abstractmethod
    def _run(self) -> None:
        """The thread's loop: return once ``_running`` is false and the work is done."""


@dataclass(slots=True)
class _Op:
    fn: Callable[[Txn], Any]
    durable: bool
    future: asyncio.Future[Any] | concurrent.futures.Future[Any]
    grows: bool = False  # adds data (a send): refused while the disk is nearly full
    weight: int = 1  # messages it handles (GROUP_COMMIT_MAX_ITEMS)
    requests: int = 1  # client requests it answers (single sends sent together: several)
    move: bool = False  # moves due timers (the deliverer's op: see _take)
    # A parked receive run in the batch that woke its topic (see serve_waiting): if the
    # commit fails it answers empty (its receiver looks again), not with the error.
    empty_on_failure: bool = False


class _ClientQueue:
    """Client ops waiting for the writer, in two queues taken in turns while both wait
    (DRAIN_TURNS units of the first, then one of the second):
    those that drain the store (receives, acks, cancels …) and those that grow it (sends).
    A consumer's receive of 1000 comes in parts (Engine.receive); in one queue behind a
    producer's batch parts, each part waited for all of them and the consumer fell seconds
    behind the timers; draining always first starved the producer
    instead (0.01 of its rate alone), and one turn each let the consumer fall behind again
    (a receive of 1000 is 16 parts, each then behind a send unit)."""

    def __init__(self) -> None:
        self._drains: deque[_Op] = deque()
        self._grows: deque[_Op] = deque()
        self._drain_turns = 0  # drains taken in a row while sends waited
        self.requests = 0  # the client requests the queued ops answer (the queue's bound)

    def __len__(self) -> int:
        return len(self._drains) + len(self._grows)

    def _queue(self, op: _Op) -> deque[_Op]:
        return self._grows if op.grows else self._drains

    def append(self, op: _Op) -> None:
        self._queue(op).append(op)
        self.requests += op.requests

    def extend(self, ops: Sequence[_Op]) -> None:
        for op in ops:
            self.append(op)

    def put_back(self, ops: Sequence[_Op]) -> None:
        """Ops taken but not started go back to the head of their queue, in order."""
        for op in reversed(ops):
            self._queue(op).appendleft(op)
            self.requests += op.requests

    def take(self, max_weight: int, *, drains_only: bool = False) -> list[_Op]:
        """Ops worth at most ``max_weight`` messages (or the one at the head, if it weighs
        more), from the queue whose turn it is first (``drains_only``: from the drains
        only, a turn of theirs: see drains_turn). Only when not empty."""
        ops: list[_Op] = []
        weight = 0
        grows_first = self._drain_turns >= DRAIN_TURNS
        order: tuple[deque[_Op], ...] = (
            (self._grows, self._drains) if grows_first else (self._drains, self._grows)
        )
        if drains_only:
            order = (self._drains,)
        if self._drains and self._grows:
            self._drain_turns = 0 if grows_first else self._drain_turns + 1
        for queue in order:
            while queue and (not ops or weight + queue[0].weight <= max_weight):
                weight += queue[0].weight
                ops.append(queue.popleft())
        self.requests -= sum(op.requests for op in ops)
        return ops

    @property
    def drains_turn(self) -> bool:
        """Ops that drain the store wait, and it is not the sends' turn: a consumer's turn
        after a move counts as one of the drains' DRAIN_TURNS (taken out of turn, it
        starved a producer beside consumers and due timers: 0.03 of its rate alone)."""
        return bool(self._drains) and not (self._grows and self._drain_turns >= DRAIN_TURNS)


class Writer(_Loop):
    thread_name = "rocktimer-writer"

    def __init__(
        self,
        store: RocksStore,
        clock: Clock,
        *,
        queue_size: int,
        on_commit: Callable[[Txn], None] | None = None,
        serve_waiting: Callable[[Txn], list[tuple[Callable[[Txn], Any], asyncio.Future[Any]]]]
        | None = None,
        min_free_bytes: int = 0,
        log_events: bool = True,
        changelog: Changelog | None = None,
    ) -> None:
        """``changelog``: the partition is replicated (cluster mode): every batch is
        appended to it, and none is written once it refuses."""
        super().__init__()
        self.store = store
        self.changelog = changelog
        # The append of the last batch written: an op that wrote nothing may answer from it.
        self._last_append: concurrent.futures.Future[int] | None = None
        self.log_events = log_events  # stage events in each batch (workers/ops/events.py)
        self.clock = clock
        self.queue_size = queue_size
        self.min_free_bytes = min_free_bytes
        self.disk_low = False
        self._next_reopen_ms = 0
        self._meta: dict[bytes, bytes | None] = {}  # the meta values its commits left (Txn)
        self._next_disk_check_ms = 0
        self._on_commit = on_commit
        self._serve_waiting = serve_waiting
        self._clients = _ClientQueue()
        self._internal: deque[_Op] = deque()
        self._follow_ups: list[_Op] = []  # batch lock holder only (see follow_up)
        # Another thread is writing a batch inline: client ops queued meanwhile are its to
        # take when it is done (_consumers_turn), the writer thread is not woken for them.
        self._inline = False
        # The writer thread took ops and has not finished them: nothing runs inline meanwhile.
        self._in_hand = False
        # The scanner waits for the batch being written to end before it can pick up a due
        # timer (wait_horizon): the next slot is that timer's move (but see _take).
        self._move_due = False
        self._moved_last = False  # the last batch written moved due timers (see _take)
        # Held by whoever is writing a batch: the writer thread, or the event loop running
        # an op inline (submit). Everything _process_batch touches is under it.
        self._batch_lock = threading.Lock()
        self.follow_ups_run = 0
        self._syncer = Syncer(store)
        # The scan horizon (see scan_horizon): the `now` of the batch being built, if any.
        self._horizon = threading.Condition()  # notified when a batch ends
        self._batch_now: int | None = None
        raw = store.get(CF.META, PENDING_KEY)
        self.pending_timers = read_u64(raw) if raw else 0
        self.batches = 0
        self.ops_done = 0
        self.batch_ops = Histogram(BATCH_OPS_BOUNDS)  # ops per batch: how much group commit
        # Cancels committed so far. A scanned chunk remembers the count; if it is unchanged
        # when the chunk is moved, no message in it can have been cancelled meanwhile.
        self.cancels_committed = 0

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._syncer.start()
        super().start()

    def stop(self) -> None:
        """Finish every op already queued, then stop. Ops submitted later are refused."""
        super().stop()
        self._syncer.stop()

    @property
    def running(self) -> bool:
        return self._running

    @property
    def alive(self) -> bool:
        return self._running and super().alive and self._syncer.alive

    def death(self) -> str | None:
        return self._syncer.death() or super().death()

    @property
    def fsync_seconds(self) -> Histogram:
        """How long each WAL fsync took."""
        return self._syncer.fsync_seconds

    @property
    def queue_depth(self) -> int:
        """Client requests waiting (single sends sent together count one each)."""
        return self._clients.requests

    @property
    def move_due(self) -> bool:
        """The scanner is waiting for the batch being written to end to pick up a due timer."""
        return self._move_due

    @property
    def idle(self) -> bool:
        """Nothing queued and the writer thread has nothing in hand (an inline op may run)."""
        return not (self._in_hand or self._clients or self._internal)

    # --- submitting ----------------------------------------------------------------------

    def submit(
        self,
        fn: Callable[[Txn], T],
        *,
        durable: bool,
        grows: bool = False,
        inline: bool = False,
        weight: int = 1,
    ) -> asyncio.Future[T]:
        """Queue a client op from the event loop; the future completes after the commit.

        ``grows``: the op adds data (a send); it is refused with DiskFullError while the
        disk has less than ``min_free_bytes`` left, which keeps room for the writes that
        drain the store (deliveries, receives, acks, cancels).

        ``inline``: if the writer thread is idle, run the op right here, on the event loop,
        as a batch of its own (the fsync, if durable, still on the syncer): two thread
        hand-offs fewer, which on this VM cost more than a small op itself (a receive or an
        ack). Only for ops that never block.

        ``weight``: the messages the op handles (a batch send's items), so that one client
        batch stays one bounded unit of work ahead of a move.
        """
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        op = _Op(fn, durable, future, grows, weight)
        if inline and self._run_inline(op):
            return future
        with self._cond:
            self._check_room()
            self._clients.append(op)
            self._wake_for_clients()
        return future

    def _wake_for_clients(self) -> None:
        """(Under ``_cond``.) Client ops were queued: wake the writer thread, unless a
        thread writing inline will see them as it finishes (_run_inline)."""
        if not self._inline:
            self._cond.notify()

    def _check_room(self, waiting: int = 0) -> None:
        """Refuse a client op (under ``_cond``): stopping, or the queue is full (with
        ``waiting`` ops more on their way: Engine.send's)."""
        if not self._running:
            raise WriterStopped("the service is shutting down")
        if self._clients.requests + waiting >= self.queue_size:
            raise Overloaded()

    def check_room(self, waiting: int = 0) -> None:
        """Raise as ``submit`` would for a client op now (with ``waiting`` more before it)."""
        with self._cond:
            self._check_room(waiting)

    def submit_parts(
        self,
        parts: Sequence[tuple[Callable[[Txn], T], int]],
        *,
        durable: bool,
        grows: bool = False,
        per_message: bool = False,
    ) -> list[asyncio.Future[T]]:
        """Submit one client request's work in parts, each ``(fn, weight)`` an op of its own
        (a batch send of 1000 in parts of GROUP_COMMIT_MAX_ITEMS), so that a move of due
        timers waits behind one part at most. Accepted or refused (Overloaded) as a whole:
        no request is left half done. Parts run inline, as ``submit``'s, while the writer
        stays idle; once anything else is queued (a move that fell due meanwhile), the rest
        queue behind it. ``per_message``: each message is a request of its own (single
        sends sent together, Engine.send), for the queue's bound."""
        loop = asyncio.get_running_loop()
        ops = [
            _Op(fn, durable, loop.create_future(), grows, weight, weight if per_message else 1)
            for fn, weight in parts
        ]
        with self._cond:  # single sends sent together: the last of them must fit too
            self._check_room(sum(op.requests for op in ops) - 1 if per_message else 0)
        for i, op in enumerate(ops):
            if not self._run_inline(op):
                with self._cond:
                    self._clients.extend(ops[i:])
                    self._wake_for_clients()
                break
        return [op.future for op in ops]  # type: ignore[misc]

    def call(
        self,
        fn: Callable[[Txn], T],
        *,
        durable: bool,
        internal: bool = True,
        inline: bool = False,
        move: bool = False,
    ) -> T:
        """Run an op from a worker thread and wait for its commit (blocks when queue is full).

        ``inline``: as in ``submit``, on this thread if the writer thread is idle.
        ``move``: the op moves due timers (the slot kept for a move is for this one)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        if not (inline and self._run_inline(_Op(fn, durable, future, move=move))):
            self.enqueue_internal(fn, durable=durable, future=future, internal=internal, move=move)
        while True:
            try:
                return future.result(timeout=CALL_POLL_S)
            except concurrent.futures.TimeoutError:
                if not self.alive and not future.done():  # never wait on a dead writer
                    raise WriterStopped("the writer thread is gone") from None

    def enqueue_internal(
        self,
        fn: Callable[[Txn], Any],
        *,
        durable: bool,
        future: concurrent.futures.Future[Any],
        internal: bool = True,
        move: bool = False,
    ) -> None:
        queue = self._internal if internal else self._clients
        limit = INTERNAL_QUEUE if internal else self.queue_size
        with self._cond:
            while self._running and len(queue) >= limit:
                self._cond.wait()
            if not self._running:
                raise WriterStopped("the writer is stopped")
            queue.append(_Op(fn, durable, future, move=move))
            self._cond.notify_all()

    def follow_up(self, fn: Callable[[Txn], Any], future: asyncio.Future[Any]) -> None:
        """Run ``fn`` (a quick op) as the very next batch, ahead of everything queued.

        Only from an on_commit hook (the batch lock is held): how a commit that delivers to
        a topic serves the receivers parked on it without a round trip through the loop.
        """
        self._follow_ups.append(_Op(fn, False, future))

    def scan_horizon(self) -> int:
        """The latest due time the scanner may scan up to without racing a commit.

        Ops create a timer key only for due > the `now` of their batch (an op whose due
        time has come delivers at once instead), so every key due <= the horizon is
        already committed: a scan never passes a key that lands behind it later.
        """
        with self._horizon:
            now = self.clock.now_ms()
            return now if self._batch_now is None else min(now, self._batch_now)

    def wait_horizon(self, due_ms: int, timeout_s: float) -> None:
        """Block until no batch being written holds the scan horizon below ``due_ms``.

        How the scanner waits for a key that is due but not yet behind the horizon: a
        rescan every millisecond meanwhile cost a third of the GIL under a send storm
        (two RocksDB iterators a round; py-spy).
        """
        with self._horizon:
            self._move_due = True
            self._horizon.wait_for(
                lambda: self._batch_now is None or self._batch_now >= due_ms, timeout_s
            )

    # --- the thread ----------------------------------------------------------------------

    def _take(self) -> tuple[list[_Op], bool] | None:
        """Every move waiting, as a batch of their own; else client ops worth at most
        GROUP_COMMIT_MAX_ITEMS messages (or the one op at the head, if it weighs more).
        With them, whether they are the consumers' turn after a move (not put back)."""
        with self._cond:
            while not self._clients and not self._internal:
                if not self._running:
                    return None
                self._cond.wait()
            consumer_turn = self._consumers_turn_after_move
            if self._move_due and not consumer_turn:  # see wait_horizon
                # For the move itself: an exporter's or sweeper's op that came first would
                # otherwise take the slot and let the client work go ahead of the move.
                self._cond.wait_for(self._move_queued, MOVE_HANDOFF_S)
            self._move_due = False
            self._in_hand = True
            if self._internal and not consumer_turn:
                ops = list(self._internal)
                self._internal.clear()
                self._cond.notify_all()  # room in the internal queue
                return ops, False
            ops = self._clients.take(GROUP_COMMIT_MAX_ITEMS, drains_only=consumer_turn)
            return ops, consumer_turn

    @property
    def _consumers_turn_after_move(self) -> bool:
        """(Under ``_cond``.) The last batch was a move and a unit of receives or acks (the
        last leg of a delivery) waits its turn: it goes before the next move. While timers
        fall due back to back the scanner always waits on the batch being written, and
        moves kept the slot one after another while a consumer's receive waited behind
        them (receives queued 30-50 ms behind chains of moves). Sends
        still wait for the moves."""
        return self._moved_last and self._clients.drains_turn

    def _move_queued(self) -> bool:
        return any(op.move for op in self._internal)

    def _put_back(self, ops: list[_Op]) -> None:
        """Client ops taken but not started go back to the head of the queue, in order."""
        with self._cond:
            self._clients.put_back(ops)

    def _run(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            ops, consumer_turn = taken
            try:
                # Ops that need no fsync (moves of due timers, receives) commit first and on
                # their own: a delivery or a long poll never waits behind the fsync of a
                # send storm. Concurrent requests have no order among them, so this
                # reorders nothing a client can see.
                quick, durable = _quick_first(ops)
                if quick:
                    self._process(quick)
                if durable and self._internal and not consumer_turn:  # a move came: it goes first
                    self._put_back(durable)
                elif durable:
                    self._process(durable)
            finally:
                self._in_hand = False

    def _run_inline(self, op: _Op) -> bool:
        """Process ``op`` on this thread if nobody is writing and nothing is queued."""
        if not self.idle or not self._running or self.store.failed:
            return False
        if not self._batch_lock.acquire(blocking=False):
            return False
        self._inline = True
        try:
            self._process_locked([op])
            self._consumers_turn()
        finally:
            with self._cond:  # what queued meanwhile and was not taken: the writer thread's
                self._inline = False
                if self._clients:
                    self._cond.notify()
            self._batch_lock.release()
        return True

    def _consumers_turn(self) -> None:
        """After an op run inline, one unit of the receives and acks that queued meanwhile
        (the batch lock was busy), on this thread before it lets go of the lock: not a
        hand-off to the writer thread and back for each (a consumer's receive or ack that
        found a move being written). Only when it is their turn, and
        while a move is due only after a move (_take's rule); never while a move or
        another worker's op waits, or once the writer thread has work in hand."""
        with self._cond:
            if self._in_hand or self._internal:
                return
            in_turn = self._clients.drains_turn and not self._move_due
            if not (in_turn or self._consumers_turn_after_move):
                return
            ops = self._clients.take(GROUP_COMMIT_MAX_ITEMS, drains_only=True)
        for part in _quick_first(ops):
            if part:
                self._process_locked(part)

    def _process(self, ops: list[_Op]) -> None:
        with self._batch_lock:
            self._process_locked(ops)

    def _process_locked(self, ops: list[_Op]) -> None:
        """One batch, then the follow-ups its commit asked for (and theirs, if any)."""
        self._process_batch(ops)
        while self._follow_ups:
            ops, self._follow_ups = self._follow_ups, []
            self.follow_ups_run += len(ops)
            self._process_batch(ops)

    def _healthy_store(self) -> StorageError | None:
        """Reopen the store after a failed write (rate-limited); the error if it stays bad."""
        if not self.store.failed:
            return None
        now = self.clock.now_ms()
        if now >= self._next_reopen_ms:
            self._next_reopen_ms = now + REOPEN_BACKOFF_MS
            self._syncer.drain()  # no fsync of the old DB may run across the reopen
            try:
                self.store.reopen()
                self._meta.clear()
                log.warning("store reopened after a failed write")
                return None
            except StorageError as exc:
                log.error("store reopen failed: %s", exc)
        return StorageError(BROKEN_STORE_DETAIL)

    def _run_ops(self, txn: Txn, ops: list[_Op]) -> list[tuple[_Op, bool, Any]]:
        """Each op in its own savepoint: one that raises leaves no write behind."""
        results: list[tuple[_Op, bool, Any]] = []
        for op in ops:
            if op.grows and self.disk_low:
                results.append((op, False, DiskFullError(DISK_FULL_DETAIL)))
                continue
            point = txn.savepoint()
            try:
                results.append((op, True, op.fn(txn)))
                txn.sync = txn.sync or op.durable
            except Exception as exc:
                txn.rollback(point)
                if not isinstance(exc, RocktimerError):
                    log.exception("op failed")
                results.append((op, False, exc))
        return results

    def _refusal(self) -> Exception | None:
        """Why no batch may be written now: the store is broken, or (cluster mode) this
        node no longer owns the partition."""
        broken = self._healthy_store()
        if broken is None and self.changelog is not None:
            return self.changelog.refusal()
        return broken

    def _check_disk(self) -> None:
        if self.min_free_bytes and self.clock.now_ms() >= self._next_disk_check_ms:
            self._next_disk_check_ms = self.clock.now_ms() + DISK_CHECK_MS
            self.disk_low = self.store.free_bytes() < self.min_free_bytes

    def _parked_receives(self, txn: Txn) -> list[_Op]:
        """The receives parked on the topics this batch gave something to read, when it
        needs no fsync (a move of due timers, receives): they run in this same batch (they
        read its staged writes) and are answered by its commit: one write and one commit
        less per delivery than running them after it (follow_up). Their replies still go
        out only once the move is written."""
        if not txn.woken_topics or txn.sync or self._serve_waiting is None:
            return []
        served = [
            _Op(fn, False, future, empty_on_failure=True) for fn, future in self._serve_waiting(txn)
        ]
        self.follow_ups_run += len(served)
        return served

    def _process_batch(self, ops: list[_Op]) -> None:
        broken = self._refusal()
        if broken is not None:
            _complete([(op, False, broken) for op in ops])
            return
        self._check_disk()
        with self._horizon:
            now = self.clock.now_ms()
            self._batch_now = now
        txn = Txn(
            self.store, now, self.cancels_committed, log_events=self.log_events, meta=self._meta
        )
        results: list[tuple[_Op, bool, Any]] = []
        try:
            results = self._run_ops(txn, ops)
            served = self._parked_receives(txn)
            if served:
                ops = [*ops, *served]
                results += self._run_ops(txn, served)
            if not txn.empty:
                total = self._pending_after(txn.pending_delta)
                txn.commit(total)  # unsynced: the syncer fsyncs (below)
                if self.changelog is not None:
                    self._last_append = self.changelog.append(*txn.written())
                self.pending_timers = total
                self.cancels_committed += txn.cancels  # only after the write is visible
        except Exception as exc:  # any error, not only StorageError: one that escaped
            # would kill this thread and leave every caller waiting forever
            self._meta.clear()  # what it knew may not be what the store holds
            if isinstance(exc, StorageError):
                log.error("commit of %d ops failed: %s", len(ops), exc)
            else:
                log.exception("commit of %d ops failed", len(ops))
            results = [
                (op, True, []) if op.empty_on_failure else (op, False, exc) for op, _, _ in results
            ]
        else:
            try:
                if self._on_commit is not None:
                    self._on_commit(txn)
            except Exception:  # a wake-up or a metric must never kill the writer
                log.exception("after-commit hook failed")
            if txn.sync or any(op.durable for op in ops):
                # Replies only once the WAL is fsynced (and the changelog record
                # acknowledged): also a durable op that wrote nothing (a re-send) may be
                # answering from a write not yet synced.
                self._syncer.add(results, self._last_append)
                results = []
        finally:
            with self._horizon:
                self._batch_now = None
                self._horizon.notify_all()
        self._moved_last = any(op.move for op in ops)
        self.batches += 1
        self.ops_done += len(ops)
        self.batch_ops.observe(len(ops))
        _complete(self._unless_superseded(results))

    def _pending_after(self, delta: int) -> int:
        """The pending-timers count after a batch moving it by ``delta``. It is a count
        kept beside the timers, not the timers themselves: should it ever say fewer than a
        batch removes (a store whose count and keys disagree), it stops at 0 with one line
        in the log instead of failing every batch that moves a timer from then on."""
        total = self.pending_timers + delta
        if total < 0:
            log.error(
                "the pending-timers count went below zero (%d %+d): counted as 0",
                self.pending_timers,
                delta,
            )
            return 0
        return total

    def _unless_superseded(
        self, results: list[tuple[_Op, bool, Any]]
    ) -> list[tuple[_Op, bool, Any]]:
        """The quick replies of a batch, failed if the partition was lost while it ran
        (deposed, or a paused process past its lease): not answered from a copy another
        node has taken over. A move's result stands: it goes to the deliverer, not to a
        client, and says what the commit did (the span's timers are gone from this copy,
        its record on the way to the changelog; refused, the copy is dropped with it).
        Failed, the deliverer would move the same span again once the lease was renewed:
        each of its messages delivered twice, and the pending count taken down twice."""
        late = self.changelog.refusal() if results and self.changelog is not None else None
        if late is None:
            return results
        return [result if result[0].move else (result[0], False, late) for result in results]


class Syncer(_Loop):
    """fsyncs the WAL for batches the writer has already written, on a thread of its own.

    A synced ``write`` holds the GIL through its fsync (rocksdict), which stopped the event
    loop, the scanner and the writer alike for a few hundred µs per durable batch; under
    a consumer's acks that was half the service's busy time and most of the lateness of
    deliveries. ``sync_wal`` releases the GIL, and on its own thread the
    writer goes on meanwhile: moves of due timers and receives are not held behind an
    fsync, and the batches written during one fsync share the next (group commit).

    Durable ops' replies wait here; what a batch wrote is visible to readers from its
    write on, so a reader can see a message whose producer has no reply yet (and would
    see it vanish with a crash before the fsync: the producer, without a reply, sends it
    again). After a failed fsync nothing more is acknowledged until the writer reopened
    the store: later writes may sit behind a hole in the WAL.
    """

    thread_name = "rocktimer-syncer"

    def __init__(self, store: RocksStore) -> None:
        super().__init__()
        self.store = store
        self._waiting: list[_Synced] = []
        self._busy = False
        self.syncs = 0
        self.fsync_seconds = Histogram(FSYNC_BOUNDS_S)

    def add(
        self,
        results: list[tuple[_Op, bool, Any]],
        appended: concurrent.futures.Future[int] | None = None,
    ) -> None:
        """Answer these once the WAL is synced (from the writer, after their write), and
        ``appended`` (their batch's changelog record, cluster mode) acknowledged."""
        with self._cond:
            if self._thread is None:  # not started (or stopped): sync right here
                self._sync([(results, appended)])
                return
            self._waiting.append((results, appended))
            self._cond.notify_all()

    def drain(self) -> None:
        """Wait until everything handed over has been synced and answered."""
        with self._cond:
            while (self._waiting or self._busy) and self.alive:
                self._cond.wait()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and self._running:
                    self._cond.wait()
                if not self._waiting:
                    return
                batches, self._waiting = self._waiting, []
                self._busy = True
            try:
                self._sync(batches)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _sync(self, batches: list[_Synced]) -> None:
        error: Exception | None = None
        if self.store.failed:
            error = StorageError(BROKEN_STORE_DETAIL)
        else:
            try:
                started = time.perf_counter()
                self.store.sync_wal()
                self.fsync_seconds.observe(time.perf_counter() - started)
                self.syncs += 1
            except Exception as exc:
                log.error("WAL sync of %d batches failed: %s", len(batches), exc)
                error = exc
        # The changelog appends were sent at commit, so they ran during the fsync.
        deadline = time.monotonic() + CHANGELOG_WAIT_S  # one bound for all of them
        for results, appended in batches:
            failed = error if error is not None else _replicated(appended, deadline)
            _complete(results if failed is None else [(op, False, failed) for op, _, _ in results])


_Synced = tuple[list[tuple[_Op, bool, Any]], "concurrent.futures.Future[int] | None"]


def _replicated(
    appended: concurrent.futures.Future[int] | None, deadline: float
) -> Exception | None:
    """None once the changelog record acknowledged (or there is no changelog), else why not
    (waiting until the monotonic ``deadline`` at most)."""
    if appended is None:
        return None
    try:
        appended.result(timeout=max(0.0, deadline - time.monotonic()))
    except concurrent.futures.TimeoutError:
        log.error("no changelog ack within %.0f s", CHANGELOG_WAIT_S)
        return PartitionUnavailable(CHANGELOG_LOST)
    except Exception as exc:  # refused (deposed) or lost: the changelog says which
        return exc if isinstance(exc, RocktimerError) else PartitionUnavailable(CHANGELOG_LOST)
    return None


def _quick_first(ops: list[_Op]) -> tuple[list[_Op], list[_Op]]:
    """Ops that need no fsync, then durable ones: two batches, so that a receive's reply
    never waits for an ack's fsync."""
    return [op for op in ops if not op.durable], [op for op in ops if op.durable]


def _complete(results: list[tuple[_Op, bool, Any]]) -> None:
    """Hand results back; one wake-up per event loop, not one per op."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
    for op, ok, value in results:
        fut = op.future
        if isinstance(fut, asyncio.Future):
            by_loop.setdefault(fut.get_loop(), []).append((fut, ok, value))
        elif ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)
    try:
        here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:  # a worker thread
        here = None
    for loop, items in by_loop.items():
        if loop is here:  # an op run inline: no hop to make
            _settle(items)
            continue
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
            loop.call_soon_threadsafe(_settle, items)


def _settle(items: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for fut, ok, value in items:
        if fut.done():  # the client went away (cancelled)
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)
