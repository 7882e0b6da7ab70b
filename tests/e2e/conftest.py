"""One real server per test session (and fresh ones where a test kills its own)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.server import Server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("e2e") / "data") as srv:
        yield srv


@pytest.fixture
def server_url(server: Server) -> str:
    return server.url


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=40) as c:
        yield c


@pytest.fixture
def topic() -> str:
    """A topic of this test alone, so tests sharing a server never see each other's messages."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start a server of the test's own (the test may SIGKILL it); stopped at the end."""
    started: list[Server] = []

    def make(data_dir: Path | None = None, **env: str) -> Server:
        srv = Server(data_dir or tmp_path / "data", env=env)
        started.append(srv)
        return srv.start()

    yield make
    for srv in started:
        if srv.proc is not None:
            srv.kill()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def receive_all(
    client: httpx.Client,
    topic: str,
    group: str,
    expected: int,
    timeout_s: float = 20,
    ack: bool = True,
    **params: Any,
) -> list[dict[str, Any]]:
    """Receive (long polls of 1 s) until ``expected`` messages or ``timeout_s``; ack each batch."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        body = {"max_messages": 1000, "wait_ms": 1000, **params}
        r = client.post(f"/v1/topics/{topic}/groups/{group}/receive", json=body)
        assert r.status_code == 200, r.text
        batch = r.json()["messages"]
        got.extend(batch)
        if ack and batch:
            receipts = [m["receipt"] for m in batch]
            a = client.post(f"/v1/topics/{topic}/groups/{group}/ack", json={"receipts": receipts})
            assert a.status_code == 200, a.text
    return got
