"""What every test package shares: the real server process (tests/support/server.py) and a
topic of the test's own.

``server`` is one open server for the whole session: the end-to-end, client, CLI and
pipeline tests all talk to it, each on its own ``topic``. A package that must not share
one (the console lists every topic; the fuzzers measure a quiet process) starts its own
with ``running``; a test that kills its server takes ``fresh_server``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.server import Server

# The worker processes of the servers ``running`` starts: one process unless
# ROCKTIMER_TEST_WORKERS says more (then a partitioned data dir of as many partitions), to
# run the client, CLI and console tests against workers that relay and gather.
WORKERS = os.environ.get("ROCKTIMER_TEST_WORKERS", "1")


@contextmanager
def running(data_dir: Path, env: dict[str, str] | None = None) -> Iterator[Server]:
    """A server on ``data_dir``, ready; stopped (or killed, if it will not stop) after. A
    server that starts but is not ready in time is killed, never left running."""
    srv = Server(data_dir, env={"ROCKTIMER_WORKERS": WORKERS, **(env or {})})
    try:
        srv.start()
    except RuntimeError:
        srv.kill()
        raise
    try:
        yield srv
    finally:
        if srv.proc is not None:
            srv.stop()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The open server every package shares (one per session)."""
    with running(tmp_path_factory.mktemp("server") / "data") as srv:
        yield srv


@pytest.fixture
def topic() -> str:
    """A topic of this test alone, so tests sharing a server never see each other's messages."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start a server of the test's own (the test may SIGKILL it); killed at the end."""
    started: list[Server] = []

    def make(data_dir: Path | None = None, **env: str) -> Server:
        srv = Server(data_dir or tmp_path / "data", env=env)
        started.append(srv)
        return srv.start()

    yield make
    for srv in started:
        if srv.proc is not None:
            srv.kill()
