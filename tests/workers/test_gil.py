"""The GIL switch interval follows the timers (workers/gil.py): fine from LEAD_MS before a
due time, CPython's default when nothing is due soon."""

from __future__ import annotations

import sys
import time

import pytest

from tests.workers.support import record, run, wait_until
from workers import gil
from workers.clock import FakeClock
from workers.engine import Engine


def test_fine_only_while_a_timer_is_due_soon(engine: Engine, clock: FakeClock) -> None:
    wait_until(lambda: sys.getswitchinterval() == gil.COARSE_S, what="coarse with nothing due")
    due = clock.now_ms() + 10 * gil.LEAD_MS
    run(engine.send(record("t", "m1", due)))
    wait_until(lambda: engine.scanner.next_due_ms == due, what="the scanner saw the timer")
    assert sys.getswitchinterval() == gil.COARSE_S  # not due soon yet

    clock.advance(9 * gil.LEAD_MS)  # within LEAD_MS of the due time
    wait_until(lambda: sys.getswitchinterval() == gil.FINE_S, what="fine before the due time")

    clock.advance(gil.LEAD_MS)
    wait_until(lambda: engine.deliverer.moved == 1, what="delivered")
    wait_until(lambda: sys.getswitchinterval() == gil.COARSE_S, what="coarse once nothing is due")


def test_background_work_pauses_between_slices_only_while_timers_fall_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(time, "sleep", pauses.append)
    before = sys.getswitchinterval()
    try:
        gil.fine()
        gil.give_way()
        gil.coarse()
        gil.give_way()
    finally:
        sys.setswitchinterval(before)
    assert pauses == [gil.GIVE_WAY_S, 0]
