"""Engine: the store and its workers, started and stopped as one, and the calls the HTTP
front end makes (each an op on the writer, awaited from the event loop)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from storage import keys
from storage.errors import PushedGroup, RocktimerError, StorageError
from storage.records import DeadLetter, MessageRecord
from storage.store import CF, RocksStore
from storage.txn import Txn
from workers import gil
from workers.clock import Clock, RealClock, timeout_s
from workers.deliverer import Deliverer
from workers.exporter import Exporter
from workers.histogram import Histogram
from workers.lag import DeliveryLag
from workers.notify import LongPolls, Parked
from workers.ops import consume, messages, schedules, views
from workers.rules.retry import GroupSettings, decode_settings
from workers.rules.webhook import PushSettings
from workers.scanner import MOVE_PACE_MS, PUT_QUEUE_CHUNKS, SCAN_CHUNK, Chunk, Scanner
from workers.streams import Streams
from workers.sweeper import Sweeper
from workers.thread import OwnThread
from workers.timers.schedule import Schedule
from workers.writer import (
    CONSUME_PART,
    CONSUME_WEIGHT,
    GROUP_COMMIT_MAX_ITEMS,
    Changelog,
    Writer,
)

log = logging.getLogger("rocktimer.engine")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    data_dir: str
    writer_queue_size: int = 10_000  # waiting client ops before 429
    scan_chunk: int = SCAN_CHUNK
    put_queue_chunks: int = PUT_QUEUE_CHUNKS
    move_pace_ms: int = MOVE_PACE_MS  # timers falling due back to back: a move this often
    sweep_interval_ms: int = 60_000
    retention_ms: int = 72 * 3_600_000  # delivered messages kept (RocketMQ fileReservedTime)
    dlq_retention_ms: int = 72 * 3_600_000  # dead letters kept from dead_at (RocketMQ: 3 days)
    min_free_bytes: int = 64 * 1024 * 1024  # below this, sends get 503 (room to drain)
    max_receive_bytes: int = consume.MAX_RECEIVE_BYTES  # a receive reply's messages, about
    events: bool = True  # the event log (pipeline.md); off: no events, no exporter
    events_seal_ms: int = 10_000  # the exporter seals the event log at least this often
    events_retention_ms: int = 7 * 86_400_000  # sealed segments are kept this long
    events_seal_process: bool = True  # seal in a child process (workers/sealer.py), not a thread
    due_backlog_limit_ms: int = 1_000  # deliveries this far behind: sends get 429
    # The data dir's partition this engine serves (app/cluster/), in each sealed event:
    # (partition, seq) names an event. Not a setting: the cluster sets it.
    partition: int = 0


ItemOutcome = messages.SendOutcome | Exception
# A single send waiting for its turn of the event loop to end: record, fresh id, answer.
_WaitingSend = tuple[MessageRecord, bool, "asyncio.Future[ItemOutcome]"]


def _answer(waiting: list[_WaitingSend], outs: Sequence[ItemOutcome | None]) -> None:
    for (_, _, future), out in zip(waiting, outs, strict=True):
        if not future.done():  # else its client went away
            future.set_result(cast(ItemOutcome, out))  # no None: every record is one


# Lateness buckets in ms: the target is p99 <= 10 ms, so resolve the low end finely.
LATENESS_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 60_000)


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        clock: Clock | None = None,
        *,
        memory_share: int = 1,
        changelog: Changelog | None = None,
    ) -> None:
        """``memory_share``: how many engines this process runs (partitions, app/cluster/),
        each taking that fraction of RocksDB's memory budgets (storage/store.py).
        ``changelog``: the partition is replicated (cluster mode, workers/writer.py)."""
        self.config = config
        self.clock = clock or RealClock()
        self.store = RocksStore(config.data_dir, memory_share=memory_share)
        if changelog is not None and self.store.get(CF.META, keys.RECEIPT_SECRET_KEY) is None:
            # A replicated copy gets it from its partition's first fence (every node's copy
            # the same): one made here would be this node's alone.
            self.store.close()
            raise StorageError(f"the partition copy at {config.data_dir} has no receipt secret")
        self.store.secret(keys.RECEIPT_SECRET_KEY)  # made now, before any worker runs
        self.long_polls = LongPolls()
        self.streams = Streams()
        # delivered - max(deliver_at, accepted_at) of every delivery, and the events of
        # consumption (acks, nacks, expiries, dead_letters, redrives) since start.
        self.lateness_ms = Histogram(LATENESS_BUCKETS_MS)
        self.tallies: Counter[str] = Counter()
        self.writer = Writer(
            self.store,
            self.clock,
            queue_size=config.writer_queue_size,
            on_commit=self._committed,
            serve_waiting=self._serve_waiting,
            min_free_bytes=config.min_free_bytes,
            log_events=config.events,
            changelog=changelog,
        )
        self.put_queue: queue.Queue[Chunk] = queue.Queue(maxsize=config.put_queue_chunks)
        self.deliverer = Deliverer(self.writer, self.put_queue)
        self.scanner = Scanner(
            self.store,
            self.writer,
            self.clock,
            self.put_queue,
            chunk=config.scan_chunk,
            pace_ms=config.move_pace_ms,
            deliverer=self.deliverer,
        )
        self.lag = DeliveryLag(
            self.clock,
            self.store,
            self.scanner,
            self.put_queue,
            self.deliverer,
            config.due_backlog_limit_ms,
        )
        self.sweeper = Sweeper(
            self.store,
            self.clock,
            config.sweep_interval_ms,
            writer=self.writer,
            retention_ms=config.retention_ms,
            dlq_retention_ms=config.dlq_retention_ms,
        )
        self.exporter = Exporter(
            self.store,
            self.writer,
            self.clock,
            seal_ms=config.events_seal_ms,
            retention_ms=config.events_retention_ms,
            behind=self.lag.age_ms,
            in_process=config.events_seal_process,
            partition=config.partition,
        )
        # Push groups (app/push/pusher.py POSTs their messages), kept as their settings change.
        self.push_groups: dict[tuple[str, str], PushSettings] = views.push_groups(self.store)
        self.started = False
        # Single sends waiting for their turn of the loop to end (send), and the tasks
        # that send them together.
        self._sends: dict[asyncio.AbstractEventLoop, list[_WaitingSend]] = {}
        self._send_tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        gil.coarse()  # the scanner makes it fine while timers fall due (workers/gil.py)
        self.writer.start()
        self.deliverer.start()
        self.scanner.start()
        self.sweeper.start()
        if self.config.events:
            self.exporter.start()
        self.started = True

    def stop(self) -> None:
        """Stop scanning, finish the move in hand, drain queued writes, close the store."""
        if not self.started:
            self.store.close()
            return
        self.started = False
        self.exporter.stop()
        self.sweeper.stop()
        self.scanner.stop()
        self.deliverer.stop()
        self.writer.stop()
        self.store.close()

    @property
    def healthy(self) -> bool:
        return self.started and not self.dead_workers()

    def dead_workers(self) -> list[str]:
        """Each worker thread that should be running and is not, with what ended it. A
        server process exits when there is one (app/__main__.py): nothing restarts a
        thread, and a service that takes sends it will never deliver must not stay up."""
        if not self.started:
            return []
        workers: list[OwnThread] = [self.writer, self.scanner, self.deliverer, self.sweeper]
        if self.config.events:
            workers.append(self.exporter)
        return [death for worker in workers if (death := worker.death()) is not None]

    def _serve_waiting(
        self, txn: Txn
    ) -> list[tuple[Callable[[Txn], list[consume.Received]], asyncio.Future[Any]]]:
        """The receives parked on the topics this batch woke, to run in it (Writer)."""
        return [(p.receive, p.future) for p in self.long_polls.claim(txn.woken_topics)]

    def _committed(self, txn: Txn) -> None:
        if txn.min_new_due is not None:
            self.scanner.hint(txn.min_new_due)
        if txn.woken_topics:
            for parked in self.long_polls.claim(txn.woken_topics):
                self.writer.follow_up(parked.receive, parked.future)
        if txn.drained:  # after the claim: what this batch's served receives drained
            self.long_polls.drained(txn.drained)
        if txn.lateness_ms:
            self.lateness_ms.observe_many(txn.lateness_ms)
        if txn.tallies:
            self.tallies.update(txn.tallies)

    # --- producer calls ------------------------------------------------------------------

    async def send(self, rec: MessageRecord, *, fresh_id: bool = False) -> messages.SendOutcome:
        """``fresh_id``: the msg_id was made by the server just now (see messages.send).

        The sends that arrive in one turn of the event loop go to the writer together, as
        one ``send_batch`` (each still succeeds or fails alone): their messages staged as
        columns in one op, run on the loop when the writer is idle, instead of an op, a
        savepoint and a thread hand-off each (about a fifth of the server's CPU a single-send
        request). A send waiting for its turn to end
        counts as a queued request, and so does each send of a queued op: a full queue
        refuses the same sends it did one op each (Overloaded, 429)."""
        loop = asyncio.get_running_loop()
        waiting = self._sends.setdefault(loop, [])
        self.writer.check_room(len(waiting))
        future: asyncio.Future[ItemOutcome] = loop.create_future()
        waiting.append((rec, fresh_id, future))
        if len(waiting) == 1:
            loop.call_soon(self._send_waiting, loop)
        out = await future
        if isinstance(out, Exception):
            raise out
        return out

    def _send_waiting(self, loop: asyncio.AbstractEventLoop) -> None:
        """At the end of a turn: its sends go to the writer now (so the queue counts them
        before the next turn's sends ask for room), their answers come in a task."""
        waiting = self._sends.pop(loop)
        recs = [w[0] for w in waiting]
        try:
            parts = self._submit_batch(recs, [w[1] for w in waiting], per_message=True)
        except Exception as exc:  # refused as a whole (Overloaded, WriterStopped)
            _answer(waiting, [exc] * len(waiting))
            return
        task = loop.create_task(self._send_together(waiting, recs, parts))
        self._send_tasks.add(task)  # the loop keeps a weak reference only
        task.add_done_callback(self._send_tasks.discard)

    async def _send_together(
        self,
        waiting: list[_WaitingSend],
        recs: list[MessageRecord],
        parts: list[asyncio.Future[list[ItemOutcome | None]]],
    ) -> None:
        outs: Sequence[ItemOutcome | None]
        try:
            outs = await self._batch_outcomes(recs, parts)
        except Exception as exc:  # failed as a whole: each send fails with it
            outs = [exc] * len(waiting)
        _answer(waiting, outs)

    async def send_batch(
        self, recs: Sequence[MessageRecord | None], fresh_ids: Sequence[bool] = ()
    ) -> list[ItemOutcome | None]:
        """Each item succeeds or fails alone (None items are skipped). The writer takes the
        batch in parts of GROUP_COMMIT_MAX_ITEMS (so due timers never wait for all of it);
        a part that fails as a whole (the disk filled up meanwhile) fails its items, and if
        every part failed, the request fails."""
        return await self._batch_outcomes(recs, self._submit_batch(recs, fresh_ids))

    def _submit_batch(
        self,
        recs: Sequence[MessageRecord | None],
        fresh_ids: Sequence[bool],
        *,
        per_message: bool = False,
    ) -> list[asyncio.Future[list[ItemOutcome | None]]]:
        size = GROUP_COMMIT_MAX_ITEMS
        parts = [
            (
                partial(
                    messages.send_many, recs=recs[i : i + size], fresh_ids=fresh_ids[i : i + size]
                ),
                len(recs[i : i + size]),
            )
            for i in range(0, len(recs), size)
        ]
        return self.writer.submit_parts(parts, durable=True, grows=True, per_message=per_message)

    async def _batch_outcomes(
        self,
        recs: Sequence[MessageRecord | None],
        parts: list[asyncio.Future[list[ItemOutcome | None]]],
    ) -> list[ItemOutcome | None]:
        size = GROUP_COMMIT_MAX_ITEMS
        done = await asyncio.gather(*parts, return_exceptions=True)
        failed = [part for part in done if isinstance(part, BaseException)]
        if failed and (len(failed) == len(done) or not isinstance(failed[0], Exception)):
            raise failed[0]  # nothing written: the request fails as one (503, 507 …)
        out: list[ItemOutcome | None] = []
        for i, part in zip(range(0, len(recs), size), done, strict=True):
            if isinstance(part, Exception):
                out.extend(None if r is None else part for r in recs[i : i + size])
            else:
                out.extend(part)  # type: ignore[arg-type]
        return out

    async def cancel(self, topic: str, msg_id: str) -> messages.CancelOutcome:
        return await self.writer.submit(
            lambda txn: messages.cancel(txn, topic, msg_id), durable=True
        )

    async def reschedule(self, topic: str, msg_id: str, deliver_at_ms: int) -> messages.SendOutcome:
        return await self.writer.submit(
            lambda txn: messages.reschedule(txn, topic, msg_id, deliver_at_ms), durable=True
        )

    async def put_schedule(
        self, topic: str, schedule_id: str, spec: Schedule
    ) -> tuple[bool, Schedule]:
        return await self.writer.submit(
            lambda txn: schedules.put(txn, topic, schedule_id, spec), durable=True, grows=True
        )

    async def delete_schedule(self, topic: str, schedule_id: str) -> Schedule:
        return await self.writer.submit(
            lambda txn: schedules.delete(txn, topic, schedule_id), durable=True
        )

    def status(self, topic: str, msg_id: str) -> messages.MessageStatus:
        return messages.status(self.store, topic, msg_id)

    # --- consumer calls ------------------------------------------------------------------

    async def receive(
        self,
        topic: str,
        group: str,
        limit: int,
        wait_ms: int,
        invisible_ms: int,
        *,
        own: bool = False,
    ) -> list[consume.Received]:
        """Long poll: return as soon as one message is held, or empty after ``wait_ms``.
        ``own``: the service's own receive (a webhook's), not counted as a client's long
        poll.

        A look that finds nothing parks (workers/notify.py); the commit that next gives the
        topic something runs the parked receive as its next batch and hands back its
        messages. One that found nothing after all (another receiver was first) parks again.
        A receive on a group that such a served receive read to the end, with no batch
        waking the topic since, parks without a look.

        The writer takes a receive in parts of CONSUME_PART messages, each an op of its own
        (a move of due timers waits behind one part at most): the first (which may park),
        then, if it came back full, the rest up to ``limit`` together. The reply's byte
        budget is shared by the parts.
        """
        room = consume.Room(self.config.max_receive_bytes)

        def look(txn: Txn, n: int = min(limit, CONSUME_PART)) -> list[consume.Received]:
            return consume.receive(txn, topic, group, n, invisible_ms, room)

        def served(txn: Txn) -> list[consume.Received]:
            """The look of a parked receive, run by the batch that woke its topic after
            that batch's own ops (or as the next batch): what it drained, nothing in this
            batch makes visible again (workers/notify.py)."""
            got = look(txn)
            if room.drained:
                txn.drained.append((topic, group))
            return got

        n = min(limit, CONSUME_PART)
        got = await self._first_look(topic, group, look, served, wait_ms, n, own)
        if len(got) < CONSUME_PART or len(got) >= limit:
            return got
        # A full part: more may be there. The rest in parts queued together, so that they
        # run one after another (a move between two of them), not each behind the queue.
        sizes = [min(limit - i, CONSUME_PART) for i in range(len(got), limit, CONSUME_PART)]
        rest = self.writer.submit_parts(
            [(partial(look, n=n), n * CONSUME_WEIGHT) for n in sizes], durable=False
        )
        for part in await asyncio.gather(*rest, return_exceptions=True):
            if isinstance(part, BaseException):
                if not isinstance(part, RocktimerError):
                    raise part
                continue  # what the other parts hold is answered; that part's lot waits
            got += part
        return got

    async def _first_look(
        self,
        topic: str,
        group: str,
        look: Callable[[Txn], list[consume.Received]],
        served: Callable[[Txn], list[consume.Received]],
        wait_ms: int,
        n: int,
        own: bool,
    ) -> list[consume.Received]:
        """``look`` once as an op of its own, parking if it finds nothing; ``served``: the
        same look when a parked receive is run by the batch that woke the topic. A group
        that a served look drained parks at once, without the look (LongPolls.drained)."""
        loop = asyncio.get_running_loop()
        deadline = self.clock.now_ms() + wait_ms  # on the engine's clock, as every deadline
        while True:
            parked = Parked(topic, served, loop.create_future(), own)

            def look_or_park(txn: Txn, parked: Parked = parked) -> list[consume.Received]:
                got = look(txn)
                if not got and wait_ms > 0:
                    self.long_polls.park(parked)
                return got

            try:
                if wait_ms > 0 and self.long_polls.park_drained(parked, group):
                    got = []
                else:
                    got = await self.writer.submit(
                        look_or_park, durable=False, inline=True, weight=n * CONSUME_WEIGHT
                    )
                if got or self.long_polls.closed:
                    return got
                left = deadline - self.clock.now_ms()
                if left > 0:
                    with contextlib.suppress(TimeoutError):
                        got = await asyncio.wait_for(asyncio.shield(parked.future), timeout_s(left))
            finally:
                if not self.long_polls.cancel(parked):  # claimed: its messages are coming
                    got = await parked.future
            if got or self.long_polls.closed or self.clock.now_ms() >= deadline:
                return got

    async def stream(
        self, topic: str, group: str, invisible_ms: int, max_in_flight: int, idle_ms: int
    ) -> AsyncIterator[list[consume.Received]]:
        """The messages of one stream, each batch the moment it is visible, never more than
        ``max_in_flight`` unsettled (workers/streams.py); an empty batch after ``idle_ms``
        with nothing to send (the caller's keep-alive). Ends at a stop."""
        with self.streams.open(max_in_flight) as stream:
            quiet_since = self.clock.now_ms()
            while not self.streams.closed:
                now = self.clock.now_ms()
                self.streams.expire(stream, now)
                idle_end = quiet_since + idle_ms
                if now >= idle_end:
                    quiet_since = now
                    yield []
                elif stream.free:
                    got = await self.receive(
                        topic, group, stream.free, idle_end - now, invisible_ms
                    )
                    if got:
                        quiet_since = self.clock.now_ms()
                        for one in got:  # a deadline no earlier than the engine's own
                            self.streams.hand_out(stream, one.receipt, quiet_since + invisible_ms)
                        yield got
                else:  # full: until a slot is settled, or expires, or it is time to say so
                    stream.freed.clear()
                    until = min(idle_end, stream.next_expiry() or idle_end)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stream.freed.wait(), timeout_s(until - now))

    def release_long_polls(self) -> None:
        """Answer every waiting long poll now, empty, let none wait from now on, and end
        every stream: the first step of a stop (on the event loop, which the parked
        receives wait on)."""
        self.streams.close()
        for parked in self.long_polls.close():
            if not parked.future.done():
                parked.future.set_result([])

    async def ack(self, topic: str, group: str, receipts: list[str]) -> list[str]:
        statuses = await self._settle(
            receipts, lambda txn, part: consume.ack(txn, topic, group, part)
        )
        self.streams.settled(receipts)
        return statuses

    async def nack(
        self, topic: str, group: str, receipts: list[str], delay_ms: int | None
    ) -> list[str]:
        statuses = await self._settle(
            receipts, lambda txn, part: consume.nack(txn, topic, group, part, delay_ms)
        )
        self.streams.settled(receipts)
        return statuses

    async def _settle(
        self, receipts: list[str], settle: Callable[[Txn, list[str]], list[str]]
    ) -> list[str]:
        """An ack or nack in parts of CONSUME_PART receipts (as a receive), accepted or
        refused as one; each receipt's status. A part that failed (the store broke) fails
        the request: acking again is harmless (``acked``)."""

        def op(receipts: list[str]) -> tuple[Callable[[Txn], list[str]], int]:
            return (lambda txn: settle(txn, receipts)), len(receipts) * CONSUME_WEIGHT

        cuts = range(0, len(receipts), CONSUME_PART)
        futures = self.writer.submit_parts(
            [op(receipts[i : i + CONSUME_PART]) for i in cuts], durable=True
        )
        if len(futures) == 1:  # the usual ack: no gather (a task and a turn of the loop)
            return await futures[0]
        done = await asyncio.gather(*futures, return_exceptions=True)
        statuses: list[str] = []
        for part in done:
            if isinstance(part, BaseException):
                raise part
            statuses += part
        return statuses

    async def change_invisibility(
        self, topic: str, group: str, receipt: str, invisible_ms: int
    ) -> str:
        renewed = await self.writer.submit(
            lambda txn: consume.change_invisibility(txn, topic, group, receipt, invisible_ms),
            durable=True,
        )
        self.streams.renewed(receipt, renewed, self.clock.now_ms() + invisible_ms)
        return renewed

    async def redrive(self, topic: str, group: str, msg_id: str) -> None:
        await self.writer.submit(
            lambda txn: consume.redrive(txn, topic, group, msg_id), durable=True
        )

    async def put_group_settings(
        self, topic: str, group: str, settings: GroupSettings
    ) -> GroupSettings:
        """Store the settings (a push keeps its stored secret unless given a new one);
        returns them as stored."""

        def put(txn: Txn) -> GroupSettings:
            stored = settings.keeping_secret(consume.group_settings(txn, topic, group))
            consume.put_group_settings(txn, topic, group, stored)
            return stored

        stored: GroupSettings = await self.writer.submit(put, durable=True)
        if stored.push is None:
            self.push_groups.pop((topic, group), None)
        else:
            self.push_groups[topic, group] = stored.push
        return stored

    def refuse_if_pushed(self, topic: str, group: str) -> None:
        """Receives (and streams) are for pull groups: a push group's messages go to its
        webhook, and a consumer taking some would starve it."""
        if (topic, group) in self.push_groups:
            raise PushedGroup(
                f"group {group!r} of topic {topic!r} has push delivery set: its messages are "
                "POSTed to its push url (set push to null to receive them)"
            )

    def group_settings(self, topic: str, group: str) -> GroupSettings:
        raw = self.store.get(CF.META, keys.group_key(topic, group))
        return decode_settings(raw, f"{topic}/{group}")

    def group_view(self, topic: str, group: str, msg_id: str) -> consume.GroupView:
        return consume.group_view(self.store, topic, group, msg_id)

    def dead_letter(self, topic: str, group: str, msg_id: str) -> DeadLetter:
        return consume.dead_letter(self.store, topic, group, msg_id)

    def dead_letters(
        self, topic: str, group: str, after: bytes | None, limit: int
    ) -> tuple[list[tuple[bytes, DeadLetter]], bool]:
        return consume.dead_letters(self.store, topic, group, after, limit)

    # --- browsing (read-only, no writer) ---------------------------------------------------

    def topics(self, after: str | None, limit: int) -> tuple[list[views.TopicSummary], bool]:
        return views.topics(self.store, after, limit)

    def groups(
        self, topic: str, after: str | None, limit: int
    ) -> tuple[list[views.GroupSummary], bool]:
        return views.groups(self.store, topic, after, limit)

    def scheduled(
        self, topic: str, after: bytes | None, limit: int
    ) -> tuple[list[MessageRecord], bytes | None]:
        return views.scheduled(self.store, topic, after, limit, self.clock.now_ms())
