"""Push delivery: the service receives for each push group and POSTs every message to its
webhook (api.md, "Push delivery"; the pure rules are in workers/rules/webhook.py).

Per push group, one receive loop long-polls the engine's own receive for as many messages
as the group may still POST (``max_in_flight`` at once), POSTs each one on its own task,
and hands the outcome to the group's settler, which acks the 2xx replies and nacks the
rest in batches (a nack with Retry-After's delay, or the group's retry policy: exactly
what a consumer's nack does, DLQ included). While a batch commits (an fsync), the next
POSTs go on: a group holds at most ``max_in_flight`` POSTs under way plus SETTLING_MAX
answered messages whose ack or nack is committing (a receipt and a verdict each), so a
slow or dead endpoint fills only its own group's slots and memory stays bounded.

It runs on the app's event loop. The receives, acks and nacks are the engine's own ops,
whose futures the writer settles on the loop that awaits them; a second loop in a thread
of its own would add a cross-thread hand-off to each of them and, under the GIL, no
parallelism. What keeps the API responsive is the bound on what a group has under way.

At-least-once: a received message is invisible for ``timeout_ms`` + INVISIBLE_MARGIN_MS.
If the process dies (or stops) with a POST under way, or its ack is not committed in that
time, the message comes back after the invisibility and is POSTed again, with
``attempt`` + 1: a receiver may see a message twice and should be idempotent on
(topic, msg_id).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from functools import partial

import orjson

from app.push.client import Pool
from app.wire import received_item
from storage.errors import Overloaded, RocktimerError, StoreClosedError, WriterStopped
from workers.clock import timeout_s
from workers.engine import Engine
from workers.ops.consume import Received
from workers.rules.retry import GroupSettings
from workers.rules.webhook import (
    FAILED,
    SIGNATURE_HEADER,
    PushSettings,
    Verdict,
    host_allowed,
    signature,
    verdict,
)

log = logging.getLogger("rocktimer.push")

# A pushed message stays invisible this much longer than the POST may take: time for the
# ack to commit. An ack later than that finds the message received again (at-least-once).
INVISIBLE_MARGIN_MS = 2_000
RECEIVE_WAIT_MS = 30_000  # each long poll of a push group (cut short at a change or stop)
BACKOFF_S = 0.1  # after the writer refused an op (its queue was full): try again then
SETTLING_MAX = 1_024  # answered messages a group may hold while their acks commit: an fsync
# of 20-50 ms must not stop the receives (bounded at max_in_flight, at 5,000/s a group
# stopped for each fsync longer than ~25 ms and webhooks came tens of ms late)
STOP_GRACE_S = 2.0  # at a stop, POSTs under way get this long; cut off, they come back

Key = tuple[str, str]  # (topic, group)


class Tally:
    """A push group's outcomes, kept across changes of its settings (for /metrics)."""

    __slots__ = ("failed", "in_flight", "ok")

    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0
        self.in_flight = 0  # POSTs under way


class GroupPusher:
    """One push group: its receive loop, its POSTs, its settler."""

    def __init__(
        self, engine: Engine, topic: str, group: str, push: PushSettings, tally: Tally
    ) -> None:
        self.engine = engine
        self.topic = topic
        self.group = group
        self.push = push
        self.tally = tally
        self.pool = Pool(push.url)
        self.posting = 0  # POSTs under way: at most max_in_flight
        self.held = 0  # received, not yet acked or nacked: max_in_flight + SETTLING_MAX at most
        self.room = asyncio.Event()  # a POST ended, or a batch was settled
        self.outcomes: list[tuple[str, Verdict]] = []  # (receipt, verdict), to settle
        self.to_settle = asyncio.Event()
        self.posts: set[asyncio.Task[None]] = set()
        self.stopping = False
        self.receiving = asyncio.create_task(self._receive_loop(), name=f"push {topic}/{group}")
        self.settling = asyncio.create_task(self._settle_loop(), name=f"settle {topic}/{group}")

    async def _receive_loop(self) -> None:
        invisible_ms = self.push.timeout_ms + INVISIBLE_MARGIN_MS
        limit = self.push.max_in_flight
        while True:
            while (wanted := min(limit - self.posting, limit + SETTLING_MAX - self.held)) <= 0:
                self.room.clear()
                await self.room.wait()
            try:
                got = await self.engine.receive(
                    self.topic, self.group, wanted, RECEIVE_WAIT_MS, invisible_ms, own=True
                )
            except Overloaded:
                await asyncio.sleep(BACKOFF_S)
                continue
            except (WriterStopped, StoreClosedError):
                return  # stopping: what it holds comes back after the invisibility
            except Exception:
                log.exception("push %s/%s: receive failed", self.topic, self.group)
                await asyncio.sleep(BACKOFF_S)
                continue
            if not got and self.engine.long_polls.closed:
                return  # the service is stopping: no more receives
            self.held += len(got)
            self.posting += len(got)
            for item in got:
                task = asyncio.create_task(self._post(item))
                self.posts.add(task)
                task.add_done_callback(self.posts.discard)

    async def _post(self, got: Received) -> None:
        item = received_item(self.topic, got)
        del item["receipt"]
        item["group"] = self.group
        body = orjson.dumps(item)
        headers = {}
        if self.push.secret is not None:
            headers[SIGNATURE_HEADER] = signature(self.push.secret, self._now(), body)
        self.tally.in_flight += 1
        try:
            reply = await self.pool.post(body, headers, timeout_s(self.push.timeout_ms))
        except Exception as exc:  # refused, timed out, not HTTP: all one failed attempt
            log.debug("push %s/%s %s failed: %r", self.topic, self.group, got.record.msg_id, exc)
            outcome = FAILED
        else:
            outcome = verdict(reply.status, reply.retry_after, self._now())
        finally:
            self.tally.in_flight -= 1
            self.posting -= 1
            self.room.set()
        if outcome.ok:
            self.tally.ok += 1
        else:
            self.tally.failed += 1
        self.outcomes.append((got.receipt, outcome))
        self.to_settle.set()

    def _now(self) -> int:
        return self.engine.clock.now_ms()

    async def _settle_loop(self) -> None:
        """Ack and nack what the POSTs came back with, in batches: all that came in while
        the last batch was committing. Ends once stopping with nothing left to settle."""
        while not (self.stopping and not self.outcomes):
            await self.to_settle.wait()
            self.to_settle.clear()
            batch, self.outcomes = self.outcomes, []
            nacks: dict[int | None, list[str]] = {}
            for receipt, outcome in batch:
                if not outcome.ok:
                    nacks.setdefault(outcome.delay_ms, []).append(receipt)
            if acks := [receipt for receipt, outcome in batch if outcome.ok]:
                await self._settle(partial(self.engine.ack, self.topic, self.group, acks))
            for delay_ms, receipts in nacks.items():
                nack = partial(self.engine.nack, self.topic, self.group, receipts, delay_ms)
                await self._settle(nack)
            self.held -= len(batch)
            self.room.set()

    async def _settle(self, op: Callable[[], Awaitable[list[str]]]) -> None:
        """Commit one ack or nack: tried again while the writer's queue is full; when the
        engine is stopping, the messages come back after their invisibility instead."""
        while True:
            try:
                await op()
                return
            except Overloaded:
                await asyncio.sleep(BACKOFF_S)
            except RocktimerError as exc:  # stopping: they come back after the invisibility
                log.warning("push %s/%s: not settled: %s", self.topic, self.group, exc)
                return
            except Exception:
                log.exception("push %s/%s: not settled", self.topic, self.group)
                return

    def cut_off(self) -> None:
        """End the POSTs under way now: their messages come back after the invisibility."""
        for task in self.posts:
            task.cancel()

    async def stop(self, grace_s: float) -> None:
        """Stop receiving; give the POSTs under way ``grace_s`` (the rest are cut off and
        come back after their invisibility); settle what they got; close the connections."""
        self.receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.receiving
        if self.posts:
            await asyncio.wait(list(self.posts), timeout=grace_s)
        self.cut_off()
        await asyncio.gather(*self.posts, return_exceptions=True)
        self.stopping = True
        self.to_settle.set()
        await self.settling
        self.pool.close()


class Pusher:
    """Every push group's GroupPusher: started with the app, changed with the settings."""

    def __init__(self, engine: Engine, allowed_hosts: frozenset[str]) -> None:
        self.engine = engine
        self.allowed_hosts = allowed_hosts
        self.groups: dict[Key, GroupPusher] = {}
        self.tallies: dict[Key, Tally] = {}
        self.retiring: dict[asyncio.Task[None], GroupPusher] = {}  # stopping after a change

    def start(self) -> None:
        """Push for every push group in the store, and follow changes of settings."""
        for (topic, group), push in self.engine.push_groups.items():
            self._begin(topic, group, push)

    def _begin(self, topic: str, group: str, push: PushSettings) -> None:
        if not host_allowed(push.host, self.allowed_hosts):
            log.warning(
                "push group %s/%s is not pushed: host %r of its url is not in "
                "ROCKTIMER_PUSH_ALLOWED_HOSTS",
                topic,
                group,
                push.host,
            )
            return
        tally = self.tallies.setdefault((topic, group), Tally())
        try:
            pusher = GroupPusher(self.engine, topic, group, push, tally)
        except Exception:  # no stored setting may stop the start or another group
            log.exception(
                "push group %s/%s is not pushed: its push settings cannot be used; "
                "PUT the group's settings again",
                topic,
                group,
            )
            return
        self.groups[topic, group] = pusher

    def changed(self, topic: str, group: str, settings: GroupSettings) -> None:
        """A group's settings were stored (the settings route tells it): its pushes start,
        stop or move to the new URL."""
        current = self.groups.get((topic, group))
        if current is not None and current.push == settings.push:
            return  # its retry policy, max_attempts or filter: read by each op anyway
        if current is not None:
            # What it has under way may finish (as with any consumer that goes away).
            del self.groups[topic, group]
            task = asyncio.create_task(current.stop(current.push.timeout_ms / 1000))
            self.retiring[task] = current
            task.add_done_callback(self.retiring.pop)
        if settings.push is not None:
            self._begin(topic, group, settings.push)

    async def stop(self) -> None:
        """Stop every group's pushes (a grace of STOP_GRACE_S for those under way)."""
        pushers, self.groups = list(self.groups.values()), {}
        for retiring in self.retiring.values():
            retiring.cut_off()
        await asyncio.gather(*(p.stop(STOP_GRACE_S) for p in pushers), *self.retiring)
