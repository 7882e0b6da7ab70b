"""The console's "due in the next hour": one bounded read view over the timers, counting
scheduled messages only (retry and invisibility timers are the engine's own)."""

from __future__ import annotations

from storage import keys
from storage.store import CF
from tests.workers.support import record, run, topic_log, wait_until
from workers.clock import FakeClock
from workers.engine import Engine
from workers.ops import views

MINUTE_MS = 60_000


def test_due_ahead_counts_messages_per_bucket_and_not_internal_timers(
    engine: Engine, clock: FakeClock
) -> None:
    now = clock.now_ms()
    for i, minutes in enumerate((0, 0, 1, 5, 59, 60, 90)):
        run(engine.send(record("t", f"m{i}", now + minutes * MINUTE_MS + 1)))
    # A held message's invisibility timer, inside the hour: the engine's own, not counted.
    run(engine.send(record("t", "held", now - 1)))
    wait_until(lambda: topic_log(engine.store, "t") != [], what="the past message delivered")
    assert len(run(engine.receive("t", "g", 1, 0, 2 * MINUTE_MS))) == 1
    timers = [k for k, _ in engine.store.scan(CF.TIMERS, b"", b"\xff" * 9, 100)]
    assert sum(map(keys.is_internal_timer, timers)) == 1

    ahead = views.due_ahead(engine.store, now, MINUTE_MS, 60, limit=100)
    expected = [0] * 60
    for minute in (0, 0, 1, 5, 59):
        expected[minute] += 1
    assert ahead == views.DueAhead(expected, capped=False)

    capped = views.due_ahead(engine.store, now, MINUTE_MS, 60, limit=3)
    assert capped.capped
    assert sum(capped.counts) == 3
