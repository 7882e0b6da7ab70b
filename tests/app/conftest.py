"""A real uvicorn server running the app in this process (so tests can reach its engine)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI

from app.config import Settings
from app.main import create_app
from tests.support.process import free_port
from workers.clock import Clock
from workers.engine import Engine


class LiveApp:
    def __init__(self, app: FastAPI, url: str) -> None:
        self.app = app
        self.url = url

    @property
    def engine(self) -> Engine:
        engine: Engine = self.app.state.engine
        return engine


@contextmanager
def serve(settings: Settings, clock: Clock | None = None) -> Iterator[LiveApp]:
    """Run the app under uvicorn on 127.0.0.1 in a thread; stop it (lifespan and all) after."""
    app = create_app(settings, clock)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="test-uvicorn")
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield LiveApp(app, f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        assert not thread.is_alive(), "uvicorn did not stop"


@pytest.fixture
def live(tmp_path: Path) -> Callable[..., Any]:
    """``live(**settings)`` → a context manager serving the app on a store in tmp_path."""

    def make(clock: Clock | None = None, **overrides: Any) -> Any:
        settings = Settings(data_dir=str(tmp_path / "data"), **overrides)
        return serve(settings, clock)

    return make
