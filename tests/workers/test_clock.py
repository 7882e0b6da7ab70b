"""The real clock: wall time carried forward by the monotonic clock (a step back of the
wall clock is not followed, a step forward is), and waits that no deadline can break."""

from __future__ import annotations

import threading
import time

import pytest

from workers import clock as clocks
from workers.clock import RealClock

HOUR_NS = 3_600 * 10**9
MS_NS = 10**6
T0 = 1_800_000_000_000 * MS_NS  # a wall-clock reading, in ns


class Hands:
    """A wall clock and a monotonic clock moved by hand (ns)."""

    def __init__(self) -> None:
        self.wall = T0
        self.mono = 5 * HOUR_NS

    def tick(self, ns: int) -> None:
        """Real time passes: both clocks move."""
        self.wall += ns
        self.mono += ns


def test_a_step_back_of_the_wall_clock_is_not_held_and_not_followed() -> None:
    hands = Hands()
    clock = RealClock(lambda: hands.wall, lambda: hands.mono)
    assert clock.now_ms() == T0 // MS_NS
    hands.tick(1_000 * MS_NS)
    assert clock.now_ms() == T0 // MS_NS + 1_000

    hands.wall -= HOUR_NS  # the wall clock steps back an hour
    assert clock.now_ms() == T0 // MS_NS + 1_000  # never backwards
    hands.tick(2_000 * MS_NS)
    # Two seconds later it reads two seconds later: a delay of 2 s is 2 s, not an hour.
    assert clock.now_ms() == T0 // MS_NS + 3_000


def test_a_step_forward_of_the_wall_clock_is_followed() -> None:
    hands = Hands()
    clock = RealClock(lambda: hands.wall, lambda: hands.mono)
    hands.wall += HOUR_NS
    assert clock.now_ms() == (T0 + HOUR_NS) // MS_NS
    hands.tick(5 * MS_NS)
    assert clock.now_ms() == (T0 + HOUR_NS) // MS_NS + 5


def test_a_wait_measures_real_time_across_a_step_back() -> None:
    """A deadline 300 ms ahead is reached 300 ms later by the monotonic clock, though the
    wall clock stepped back an hour meanwhile (the old clock waited for the wall: an hour)."""
    offset = [0]
    clock = RealClock(lambda: time.time_ns() - offset[0])
    deadline = clock.now_ms() + 300
    offset[0] = HOUR_NS
    started = time.monotonic()
    clock.wait(threading.Event(), deadline)
    assert 0.25 <= time.monotonic() - started < 30  # not an hour
    assert clock.now_ms() >= deadline


@pytest.mark.parametrize("deadline_ms", [11_256_593_538_460, 2**53, 2**63 - 1, 2**64 + 5])
def test_a_far_deadline_is_waited_without_overflow_and_a_wake_ends_it(deadline_ms: int) -> None:
    """threading refuses a timeout past TIMEOUT_MAX (OverflowError): a wait for a timer key
    due in the year 2326 (or at 2**63) ended the scanner's thread that way."""
    clock = RealClock()
    wake = threading.Event()
    failed: list[BaseException] = []

    def waiter() -> None:
        try:
            clock.wait(wake, deadline_ms)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.05)
    wake.set()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert failed == []


def test_timeout_s_is_never_negative_and_never_past_the_cap() -> None:
    assert clocks.timeout_s(-5) == 0.0
    assert clocks.timeout_s(1_500) == 1.5
    assert clocks.timeout_s(2**63) == clocks.MAX_TIMEOUT_S < threading.TIMEOUT_MAX
