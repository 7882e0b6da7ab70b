"""Fixtures: a fake clock, a real RocksStore in tmp_path, a Writer, and Engines on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.workers.support import Gate, RecordingStore, stop_within
from workers.clock import FakeClock
from workers.engine import Engine, EngineConfig
from workers.writer import Writer

EngineFactory = Callable[..., Engine]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    return str(tmp_path / "db")


@pytest.fixture
def store(data_dir: str) -> Iterator[RecordingStore]:
    s = RecordingStore(data_dir)
    yield s
    s.close()


@pytest.fixture
def writer(store: RecordingStore, clock: FakeClock) -> Iterator[Writer]:
    w = Writer(store, clock, queue_size=1_000)
    w.start()
    yield w
    Gate.release_all()
    w.stop()


@pytest.fixture
def make_engine(data_dir: str, clock: FakeClock) -> Iterator[EngineFactory]:
    """Build (not start) an Engine on ``data_dir``; every engine is stopped at teardown and
    must not have lost a worker thread to an exception."""
    engines: list[Engine] = []

    def make(**overrides: Any) -> Engine:
        overrides.setdefault("data_dir", data_dir)
        engine = Engine(EngineConfig(**overrides), clock)
        engines.append(engine)
        return engine

    yield make
    Gate.release_all()
    for engine in engines:
        stop_within(engine)
    for engine in engines:
        assert engine.scanner.error is None, engine.scanner.error
        assert engine.deliverer.error is None, engine.deliverer.error


@pytest.fixture
def engine(make_engine: EngineFactory) -> Engine:
    e = make_engine()
    e.start()
    return e
