"""Time as int milliseconds since the epoch, from an injectable clock.

The real clock never goes backwards (the timer-span reclaim in the writer relies on it);
the fake clock only moves when a test advances it, and wakes whoever waits on it.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch; never smaller than a previous reading."""
        ...

    def wait(self, wake: threading.Event, deadline_ms: int | None) -> None:
        """Block until ``wake`` is set or the clock reaches ``deadline_ms`` (None: no limit)."""
        ...


class RealClock:
    """Wall-clock milliseconds, made monotonic: a step back of the system clock is held."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        now = time.time_ns() // 1_000_000
        with self._lock:
            if now < self._last:
                return self._last
            self._last = now
            return now

    def wait(self, wake: threading.Event, deadline_ms: int | None) -> None:
        if deadline_ms is None:
            wake.wait()
            return
        # Event.wait rounds to the OS timer; waking a fraction early and looping is what
        # keeps lateness at the millisecond.
        while not wake.is_set():
            left = deadline_ms - time.time_ns() / 1_000_000
            if left <= 0:
                return
            wake.wait(left / 1000)


class FakeClock:
    """A clock that tests move by hand; waiters wake when it passes their deadline.

    ``settle`` is what a negative check waits on instead of a sleep: every thread that was
    waiting when the clock last moved has woken, done what that time asks, and is waiting
    again. ``waits`` counts the waits begun, so a test can tell an idle worker (one wait,
    blocked) from a spinning one (a wait begun over and over), whatever the machine's load.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._cond = threading.Condition()
        self._events: set[threading.Event] = set()
        self._unsettled: set[threading.Event] = set()  # woken by the last move, not back yet
        self.waits = 0

    def now_ms(self) -> int:
        with self._cond:
            return self._now

    def advance(self, ms: int) -> int:
        """Move forward by ``ms`` and wake every waiter; returns the new time."""
        if ms < 0:
            raise ValueError("a clock does not go backwards")
        with self._cond:
            self._now += ms
            events = list(self._events)
            self._unsettled = set(events)
        for event in events:
            event.set()
        return self._now

    def set(self, now_ms: int) -> int:
        return self.advance(now_ms - self.now_ms())

    def settle(self, timeout_s: float = 10.0) -> None:
        """Until every thread the last move woke waits on the clock again."""
        with self._cond:
            if not self._cond.wait_for(lambda: not self._unsettled, timeout_s):
                raise TimeoutError(f"{len(self._unsettled)} waiter(s) never waited again")

    def wait(self, wake: threading.Event, deadline_ms: int | None) -> None:
        with self._cond:
            self._events.add(wake)
            self.waits += 1
            if not wake.is_set() and (deadline_ms is None or self._now < deadline_ms):
                # Back to waiting at this time (a wait already woken or due returns at
                # once: its caller has more to do before it is settled).
                self._unsettled.discard(wake)
                self._cond.notify_all()
        try:
            while not wake.is_set():
                if deadline_ms is not None and self.now_ms() >= deadline_ms:
                    return
                wake.wait(0.05)  # advance() sets every waiter's event; this is a backstop
        finally:
            with self._cond:
                self._events.discard(wake)
