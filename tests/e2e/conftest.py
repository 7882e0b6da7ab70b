"""The end-to-end tests' helpers over the shared server (tests/conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import Server


@pytest.fixture
def server_url(server: Server) -> str:
    return server.url


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=40) as c:
        yield c


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


@pytest.fixture
def fresh_client() -> Iterator[Callable[[Server], httpx.Client]]:
    """A client that opens a new connection per request: the kernel (SO_REUSEPORT) hands
    each to any worker, so requests arrive at owners and non-owners alike."""
    made: list[httpx.Client] = []

    def make(server: Server) -> httpx.Client:
        c = httpx.Client(
            base_url=server.url, timeout=10, limits=httpx.Limits(max_keepalive_connections=0)
        )
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def make(workers: int = 2, partitions: int = 0, **env: str) -> Server:
        settings = {"ROCKTIMER_WORKERS": str(workers), **env}
        if partitions:
            settings["ROCKTIMER_PARTITIONS"] = str(partitions)
        srv = Server(tmp_path / "data", env=settings)
        started.append(srv)
        return srv.start()

    yield make
    for srv in started:
        if srv.proc is not None:
            srv.stop()
