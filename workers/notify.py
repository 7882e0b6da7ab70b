"""Long polls: a receiver that found nothing parks, and the batch that gives its topic
something to read runs its receive at once: in itself, or as the very next batch.

Through the event loop alone, a delivery would reach a waiting consumer in three thread
hops: the writer wakes the loop, the loop queues a receive for the writer, the writer wakes
the loop again with the result; each hop waits for the GIL behind whatever else is running,
and a long-polling consumer hears of a due message milliseconds late. So the parked
receives of every topic a batch woke are claimed by whoever writes that batch: a batch
that needs no fsync (a move of due timers) runs them in itself, after its own ops and
before its commit, reading what it staged (Writer's serve_waiting); a durable one has its
commit hook run them as the very next batch (Writer.follow_up). The loop hears back once,
with the messages.

A parked receive is claimed or cancelled exactly once, under one lock: the writer claims
it (then its receive runs and its future gets the result), or the loop cancels it (time
is up, or the client went away; then it never runs). A receiver whose cancel comes too
late waits for the claimed receive instead, so no message is ever held for nobody.

A receive that read everything its group could take (``drained``) is remembered until
a batch next wakes its topic: the receiver's next long poll on the topic (a stream's,
right after its messages went out; a polling consumer's next request) parks at once,
without a batch of its own to find the topic empty. What makes a message visible to a
group (a move, a retry or a redrive falling due, a nack) wakes its topic in the batch
that does it, and the claim of that wake forgets the topic's drained groups under the
same lock a park takes: no wake can slip between the check and the park.

At a stop, ``close`` cancels every parked receive at once (their receivers answer empty:
a 30 s long poll must not hold up a SIGTERM) and no receive parks after it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import Any

from storage.txn import Txn

_WAITING, _CLAIMED, _CANCELLED = range(3)
MAX_DRAINED_TOPICS = 10_000  # topics with drained groups remembered at once


class Parked:
    """One long poll waiting on ``topic``: its receive op and the future for the result.
    ``own``: the service's own (a webhook's receive loop), not a client's: not counted."""

    __slots__ = ("future", "own", "receive", "state", "topic")

    def __init__(
        self,
        topic: str,
        receive: Callable[[Txn], Any],
        future: asyncio.Future[Any],
        own: bool = False,
    ) -> None:
        self.topic = topic
        self.receive = receive
        self.future = future
        self.own = own
        self.state = _WAITING


class LongPolls:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parked: dict[str, list[Parked]] = {}
        self.closed = False
        self.parks = 0  # long polls parked since start: each look that found nothing
        self.parked_unlooked = 0  # of them, parked on a drained record without a look
        self._drained: dict[str, set[str]] = {}  # topic -> the groups it has drained

    def park(self, parked: Parked) -> None:
        """Wait for the next commit that wakes the topic (from the op that found nothing,
        under the writer's batch lock: no commit can slip in between the look and the
        park)."""
        with self._lock:
            if parked.state == _WAITING and not self.closed:  # not cancelled meanwhile
                self._parked.setdefault(parked.topic, []).append(parked)
                self.parks += 1

    def drained(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Each (topic, group): a receive read all the group could take of the topic, in a
        batch now committed (Engine's commit hook, after its claim: the receives served in
        a batch run after its other ops, so nothing in it made more visible since)."""
        with self._lock:
            for topic, group in pairs:
                if len(self._drained) >= MAX_DRAINED_TOPICS and topic not in self._drained:
                    self._drained.clear()  # a look each again, not a record a topic for ever
                self._drained.setdefault(topic, set()).add(group)

    def park_drained(self, parked: Parked, group: str) -> bool:
        """Park without a look if ``group`` drained the topic and no batch woke it since;
        False: the receiver has to look."""
        with self._lock:
            if self.closed or parked.state != _WAITING:
                return False
            if group not in self._drained.get(parked.topic, ()):
                return False
            self._parked.setdefault(parked.topic, []).append(parked)
            self.parks += 1
            self.parked_unlooked += 1
            return True

    def cancel(self, parked: Parked) -> bool:
        """Never run it; False if the writer already claimed it (its result is coming)."""
        with self._lock:
            if parked.state == _CLAIMED:
                return False
            if parked.state == _WAITING:
                parked.state = _CANCELLED
                waiting = self._parked.get(parked.topic, [])
                if parked in waiting:
                    waiting.remove(parked)
                    if not waiting:
                        del self._parked[parked.topic]
            return True

    def close(self) -> list[Parked]:
        """Cancel every parked receive and park none from now on; returns the cancelled
        ones (their receivers are to be answered, empty)."""
        with self._lock:
            self.closed = True
            cancelled = [p for waiting in self._parked.values() for p in waiting]
            self._parked.clear()
            for parked in cancelled:
                parked.state = _CANCELLED
        return cancelled

    def claim(self, topics: Iterable[str]) -> list[Parked]:
        """Every receive parked on these topics, for the writer to run next; a batch woke
        them, so none of their groups is drained any more."""
        with self._lock:
            claimed: list[Parked] = []
            for topic in topics:
                claimed += self._parked.pop(topic, ())
                self._drained.pop(topic, None)
            for parked in claimed:
                parked.state = _CLAIMED
        return claimed

    @property
    def waiting(self) -> int:
        """Clients waiting in a long poll (the service's own receive loops left out)."""
        with self._lock:
            return sum(not p.own for w in self._parked.values() for p in w)
