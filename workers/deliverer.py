"""The deliverer: drains the put queue and has the writer move each batch atomically."""

from __future__ import annotations

import logging
import queue
import time

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
        self.moving: Chunk | None = None  # the batch being moved (workers/lag.py reads it)

    def run(self) -> None:
        """Until stopped, after the move in hand. Keys still queued stay timers: a restart
        rescans them."""
        while not self.stopping:
            try:
                batch = self.put_queue.get(timeout=0.1)
            except queue.Empty:
                continue
            batch = Chunk(batch, batch.cancel_mark)  # later chunks' marks are not older
            while len(batch) < DELIVER_BATCH:
                try:
                    batch.extend(self.put_queue.get_nowait())
                except queue.Empty:
                    break
            self.moving = batch
            try:
                self._move(batch)
            finally:
                self.moving = None

    def _move(self, batch: Chunk) -> None:
        """Wait for each move: the next span may only be removed after this one is."""
        attempt = 0
        while not self.stopping:
            try:
                # Inline when the writer is idle: a move at a steady few timers per ms
                # is cheaper than the two thread hand-offs to the writer and back.
                self.moved += self.writer.call(
                    lambda txn: move_due(txn, batch, batch.cancel_mark),
                    durable=False,
                    inline=True,
                    move=True,
                )
                self.batches += 1
                return
            except RocktimerError as exc:
                if not self.writer.running:
                    return
                self.failures += 1
                delay = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
                log.warning(
                    "move of %d timers failed (%s); retrying in %.2fs", len(batch), exc, delay
                )
                attempt += 1
                time.sleep(delay)
