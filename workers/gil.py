"""The GIL's switch interval, fine only while timers fall due.

A thread that wants the GIL waits up to ``sys.getswitchinterval()`` for the thread holding
it. The event loop parsing a batch send holds it in long stretches, and a due timer makes
three hand-offs (scanner, deliverer, writer), each of which could wait that long at
CPython's 5 ms (py-spy of a loaded server): so while timers fall due the interval is
0.5 ms. It is not for free: every waiting thread then wakes and forces a switch ten times
as often, which cost the writer and syncer threads twice their CPU on a single-send load
with nothing due (~25 % of the whole server's). The scanner, which knows
when the next timer is due, sets it: fine from ``LEAD_MS`` before a due time until
nothing is due soon, CPython's default otherwise.
"""

from __future__ import annotations

import sys
import time

FINE_S = 0.0005  # while timers fall due
COARSE_S = 0.005  # CPython's default: nothing due soon
LEAD_MS = 20  # fine from this long before the next due time (the scanner wakes then)
GIVE_WAY_S = 0.001  # a background thread's pause between slices while timers fall due


def fine() -> None:
    if sys.getswitchinterval() != FINE_S:
        sys.setswitchinterval(FINE_S)


def coarse() -> None:
    if sys.getswitchinterval() != COARSE_S:
        sys.setswitchinterval(COARSE_S)


def give_way() -> None:
    """Between two bounded slices of background work (the exporter's): while timers fall
    due, pause so that their hand-offs find the GIL free; otherwise just let waiting
    threads in. A background thread that only yields takes the GIL straight back, and a
    due timer's three hand-offs each wait out a switch interval behind it."""
    time.sleep(GIVE_WAY_S if sys.getswitchinterval() == FINE_S else 0)
