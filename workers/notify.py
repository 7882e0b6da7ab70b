"""Wake long-polling receivers when their topic gets something to read.

Receivers watch a topic *before* they look for messages, so a commit that lands between
their look and their wait still wakes them. The writer thread calls ``wake``; waiters live
on the event loop; one thread-safe hop per commit, not per receiver.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable


class Notifier:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self, topic: str) -> asyncio.Future[None]:
        """A future that completes at the next wake of ``topic`` (call from the loop)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        fut: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._waiters.setdefault(topic, set()).add(fut)
        return fut

    def unwatch(self, topic: str, fut: asyncio.Future[None]) -> None:
        with self._lock:
            waiters = self._waiters.get(topic)
            if waiters is not None:
                waiters.discard(fut)
                if not waiters:
                    del self._waiters[topic]

    @property
    def waiting(self) -> int:
        with self._lock:
            return sum(len(w) for w in self._waiters.values())

    def wake(self, topics: Iterable[str]) -> None:
        """Wake every receiver of these topics (from any thread)."""
        with self._lock:
            woken = [fut for topic in topics for fut in self._waiters.pop(topic, ())]
        loop = self._loop
        if woken and loop is not None:
            with contextlib.suppress(RuntimeError):  # loop closed: nobody left to wake
                loop.call_soon_threadsafe(_resolve, woken)


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_result(None)
