"""A worker thread that ends, whichever and however, makes the engine unhealthy and is
named with its error (the server process then exits: tests/e2e/test_lifecycle.py)."""

from __future__ import annotations

import pytest

from tests.workers.conftest import EngineFactory
from tests.workers.support import wait_until
from workers.clock import FakeClock
from workers.engine import Engine


def stop_syncer(engine: Engine) -> None:
    engine.writer._syncer.stop()


@pytest.mark.parametrize(
    ("stop", "name"),
    [
        (lambda e: e.scanner.stop(), "rocktimer-scanner"),
        (lambda e: e.deliverer.stop(), "rocktimer-deliverer"),
        (lambda e: e.sweeper.stop(), "rocktimer-sweeper"),
        (lambda e: e.exporter.stop(), "rocktimer-exporter"),
        (stop_syncer, "rocktimer-syncer"),
    ],
)
def test_every_worker_thread_that_ends_is_named(
    make_engine: EngineFactory, stop: object, name: str
) -> None:
    engine = make_engine()
    engine.start()
    assert engine.healthy
    assert engine.dead_workers() == []
    assert callable(stop)
    stop(engine)
    assert not engine.healthy
    assert [d.split(" ")[0] for d in engine.dead_workers()] == [name]


def test_a_worker_that_raises_is_named_with_its_error(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    """The sweeper was left out of the health check: one that died of an unexpected error
    left retention and compaction stopped behind a /readyz of 200."""
    engine = make_engine(sweep_interval_ms=10)

    def broken() -> None:
        raise RuntimeError("boom")

    engine.sweeper.tick = broken  # type: ignore[method-assign]
    engine.start()
    clock.advance(10)
    wait_until(lambda: not engine.healthy, what="the sweeper's death")
    assert engine.dead_workers() == ["rocktimer-sweeper ended: RuntimeError('boom')"]
