"""Time as int milliseconds since the epoch, from an injectable clock.

The real clock never goes backwards (the timer-span reclaim in the writer relies on it)
and measures every wait and duration in real elapsed time, whatever the system's wall
clock does meanwhile; the fake clock only moves when a test advances it, and wakes
whoever waits on it.

No wait blocks for longer than ``WAIT_SLICE_S`` at a time, whatever its deadline: a
deadline can come from a stored key (a timer due in the year 2326 is a valid key), and
``threading`` refuses a timeout past ``threading.TIMEOUT_MAX`` (OverflowError), which
would end the thread that waits. ``timeout_s`` is the one way a duration in ms becomes a
timeout for ``threading`` or ``asyncio``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

# The longest one OS-level wait of RealClock.wait: a far deadline is waited in slices, and
# a step forward of the wall clock is seen within one.
WAIT_SLICE_S = 1.0
# The longest timeout ``timeout_s`` gives (a day): far below threading.TIMEOUT_MAX and any
# event loop's limit; a caller with a longer wait looks at its clock again and waits on.
MAX_TIMEOUT_S = 86_400.0


def timeout_s(ms: float) -> float:
    """``ms`` from now as a timeout in seconds that every wait accepts: at least 0, at most
    MAX_TIMEOUT_S (callers loop until their deadline)."""
    return min(max(ms, 0.0) / 1000, MAX_TIMEOUT_S)


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch; never smaller than a previous reading."""
        ...

    def wait(self, wake: threading.Event, deadline_ms: int | None) -> None:
        """Block until ``wake`` is set or the clock reaches ``deadline_ms`` (None: no limit)."""
        ...


class RealClock:
    """The wall clock read at start, carried forward by the monotonic clock.

    Deliver times are wall-clock epoch ms (api.md), and a duration (a ``delay_ms``, a long
    poll's ``wait_ms``, an invisibility) must take that long in real time. So this clock
    follows the wall clock as it runs and when it steps forward, but not when it steps
    back: it keeps counting real elapsed time from its last reading (never backwards, and
    never holding still). After a step back it is ahead of the wall clock by the size of
    the step until the wall clock catches up or the service restarts (the scanner then
    rescans every timer: workers/scanner.py, ``_resume_cursor``).

    ``wall_ns`` and ``mono_ns`` are the two system clocks; a test passes a wall clock that
    steps back.
    """

    def __init__(
        self,
        wall_ns: Callable[[], int] = time.time_ns,
        mono_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._wall_ns = wall_ns
        self._mono_ns = mono_ns
        self._lock = threading.Lock()
        self._offset = self._wall_ns() - self._mono_ns()  # now = monotonic + offset

    def _now_ns(self) -> int:
        # The wall clock first: a pause between the two reads makes the offset seen
        # smaller, never larger, so a preempted read can never push this clock ahead.
        wall = self._wall_ns()
        mono = self._mono_ns()
        seen = wall - mono
        if seen > self._offset:  # the wall clock stepped forward: follow it (rare)
            with self._lock:  # the offset only grows: two threads must not race it down
                self._offset = max(self._offset, seen)
        # The offset is read after ``mono``, and only ever grows: a later call never
        # reads less than an earlier one (lock-free: this runs several times a request).
        return mono + self._offset

    def now_ms(self) -> int:
        return self._now_ns() // 1_000_000

    def wait(self, wake: threading.Event, deadline_ms: int | None) -> None:
        # Event.wait rounds to the OS timer; waking a fraction early and looping is what
        # keeps lateness at the millisecond. Each slice is at most WAIT_SLICE_S.
        if deadline_ms is None:
            wake.wait()
            return
        while not wake.is_set():
            left_s = (deadline_ms * 1_000_000 - self._now_ns()) / 1e9
            if left_s <= 0:
                return
            wake.wait(min(left_s, WAIT_SLICE_S))


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
