"""The deliverer: drains the put queue and has the writer move each batch atomically.

A span the scanner finds while nothing is queued here or being moved, and that is not a
full chunk (timers falling due a few at a time, not a storm), the scanner moves itself,
on its own thread, through ``move_here``: one loop scans, moves, and (through the commit's
hook, Writer.follow_up) hands the moved messages to the long polls and streams waiting
on their topic, in the same turn. At 5,000 timers/s that is a move every couple of
milliseconds, and the hand-off through the put queue to this thread (a wake-up and a turn
of the GIL each) cost as much CPU as a small move itself. A storm's full chunks still
come through the put queue, so that the next chunk is scanned while this one is moved.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from storage.errors import RocktimerError
from workers.ops.move import move_due
from workers.scanner import Chunk
from workers.thread import WorkerThread
from workers.writer import Writer

log = logging.getLogger("rocktimer.deliverer")

DELIVER_BATCH = 4_000  # timers per move; two scan chunks amortise one commit
RETRY_BACKOFF_S = (0.05, 0.2, 1.0)  # a failed move (disk full) is retried, in order


class Deliverer(WorkerThread):
    name = "rocktimer-deliverer"

    def __init__(self, writer: Writer, put_queue: queue.Queue[Chunk]) -> None:
        super().__init__()
        self.writer = writer
        self.put_queue = put_queue
        self.moved = 0
        self.batches = 0
        self.failures = 0
        self.moved_here = 0  # moves made on the scanner's thread (move_here)
        self.moving: Chunk | None = None  # the batch being moved (workers/lag.py reads it)
        # Chunks handed over (put on the queue, or about to be) and not yet moved: the
        # scanner moves a span itself only when this is 0, so spans are still removed in
        # the order they were scanned. Only the scanner adds to it: once it reads 0 there,
        # it stays 0 until the scanner hands over again.
        self._handed = 0
        self._handed_lock = threading.Lock()

    def handing_over(self) -> None:
        """The scanner is about to put a chunk on the queue (before the put)."""
        with self._handed_lock:
            self._handed += 1

    def handed_back(self) -> None:
        """The scanner's put did not happen after all (stopping)."""
        self._done(1)

    def _done(self, chunks: int) -> None:
        with self._handed_lock:
            self._handed -= chunks

    @property
    def caught_up(self) -> bool:
        """Nothing queued for this thread nor in its hands, and it is running: a span
        scanned now may be moved on the scanner's thread without overtaking one."""
        return self._handed == 0 and self.alive and not self.stopping

    def run(self) -> None:
        """Until stopped, after the move in hand. Keys still queued stay timers: a restart
        rescans them."""
        while not self.stopping:
            try:
                batch = self.put_queue.get(timeout=0.1)
            except queue.Empty:
                continue
            taken = 1
            batch = Chunk(batch, batch.cancel_mark)  # later chunks' marks are not older
            while len(batch) < DELIVER_BATCH:
                try:
                    batch.extend(self.put_queue.get_nowait())
                    taken += 1
                except queue.Empty:
                    break
            self.moving = batch
            try:
                self._move(batch, lambda: self.stopping)
            finally:
                self.moving = None
                self._done(taken)

    def move_here(self, batch: Chunk, stopping: Callable[[], bool]) -> bool:
        """Move ``batch`` on the calling thread (the scanner's, when ``caught_up``); False
        if it was not moved (``stopping``, or the writer stopped: its keys stay timers)."""
        self.moving = batch
        try:
            moved = self._move(batch, stopping)
        finally:
            self.moving = None
        self.moved_here += moved
        return moved

    def _move(self, batch: Chunk, stopping: Callable[[], bool]) -> bool:
        """Wait for each move: the next span may only be removed after this one is."""
        attempt = 0
        while not stopping():
            try:
                # Inline when the writer is idle: a move at a steady few timers per ms
                # is cheaper than the two thread hand-offs to the writer and back.
                # A retry re-reads each message's index entry (no cancel mark): a move is
                # reported failed only when its batch did not commit, and if one ever did
                # all the same, its messages are not delivered twice.
                mark = batch.cancel_mark if attempt == 0 else None
                self.moved += self.writer.call(
                    lambda txn: move_due(txn, batch, mark),  # noqa: B023 (called at once)
                    durable=False,
                    inline=True,
                    move=True,
                )
                self.batches += 1
                return True
            except RocktimerError as exc:
                if not self.writer.running:
                    return False
                self.failures += 1
                delay = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
                log.warning(
                    "move of %d timers failed (%s); retrying in %.2fs", len(batch), exc, delay
                )
                attempt += 1
                time.sleep(delay)
        return False
