"""Streaming receive: a stream is a loop of long-poll receives (Engine.receive), each for
as many messages as the stream has free slots; there is no second delivery mechanism.

A slot is taken by every receipt the stream hands out and freed when that receipt is
settled: acked or nacked through the normal endpoints (Engine.ack / Engine.nack tell
``Streams.settled`` once their commit is done), or its invisibility ran out (the stream
frees it itself at the deadline it noted; the engine's timer makes the message visible
again). ``Streams`` maps each receipt handed out to its stream: a dict lookup per acked
receipt, nothing when no stream is open, and a stream's receipts leave it as it closes.
A closed stream's unacked messages come back after ``invisible_ms``, as any receive's.

Everything here runs on the event loop (the routes and the engine's awaits): no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator


class Stream:
    """One open stream's slots: the receipts it handed out, not yet seen settled."""

    __slots__ = ("freed", "held", "max_in_flight")

    def __init__(self, max_in_flight: int) -> None:
        self.max_in_flight = max_in_flight
        # receipt -> the end of its invisibility; in hand-out order, so about deadline order
        self.held: dict[str, int] = {}
        self.freed = asyncio.Event()  # a slot freed (or the stream is to end)

    @property
    def free(self) -> int:
        return self.max_in_flight - len(self.held)

    def next_expiry(self) -> int | None:
        return next(iter(self.held.values()), None)

    def _settle(self, receipt: str) -> None:
        del self.held[receipt]
        self.freed.set()


class Streams:
    """The streams open now, and which of them handed out each receipt."""

    def __init__(self) -> None:
        self._owner: dict[str, Stream] = {}
        self._open: set[Stream] = set()
        self.closed = False

    def __len__(self) -> int:
        return len(self._open)

    @contextlib.contextmanager
    def open(self, max_in_flight: int) -> Iterator[Stream]:
        """A stream for the duration of the block; its receipts are forgotten at the end."""
        stream = Stream(max_in_flight)
        self._open.add(stream)
        try:
            yield stream
        finally:
            self._open.discard(stream)
            for receipt in stream.held:
                self._owner.pop(receipt, None)

    def hand_out(self, stream: Stream, receipt: str, deadline_ms: int) -> None:
        stream.held[receipt] = deadline_ms
        self._owner[receipt] = stream

    def settled(self, receipts: Iterable[str]) -> None:
        """These receipts were acked or nacked (or found expired or unknown): whichever
        stream handed one out has its slot back."""
        if not self._owner:
            return
        for receipt in receipts:
            stream = self._owner.pop(receipt, None)
            if stream is not None:
                stream._settle(receipt)

    def renewed(self, old: str, new: str, deadline_ms: int) -> None:
        """A held message's invisibility changed: its new receipt keeps the old one's slot."""
        stream = self._owner.pop(old, None)
        if stream is not None:
            del stream.held[old]
            self.hand_out(stream, new, deadline_ms)

    def expire(self, stream: Stream, now_ms: int) -> None:
        """Free the slots whose invisibility has run out (the message is visible again)."""
        while stream.held:
            receipt, deadline = next(iter(stream.held.items()))
            if deadline > now_ms:
                return
            del stream.held[receipt]
            self._owner.pop(receipt, None)

    def close(self) -> None:
        """End every stream (at a stop) and open none from now on."""
        self.closed = True
        for stream in self._open:
            stream.freed.set()
