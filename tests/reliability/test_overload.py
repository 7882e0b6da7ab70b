"""Overload and shutdown on the real server process: 429 + Retry-After under a burst with
bounded memory, 2,000 concurrent long polls, SIGTERM draining the writer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from bench.client import Connection, build_request
from tests.e2e.conftest import now_ms, receive_all
from tests.support.process import status_kib
from tests.support.server import Server

BURST = 600  # concurrent sends per burst: far beyond a writer queue of 4
BURSTS = 5  # bounded: stop after this many even if no 429 was seen
LONG_POLLS = 2_000
WAIT_MS = 2_000
MARGIN_S = 3.0  # how late a long poll may return on a loaded 2-core machine
RSS_LIMIT_KB = 600 * 1024


def test_burst_beyond_the_writer_queue_gets_429_and_loses_nothing(
    fresh_server: Callable[..., Server],
) -> None:
    srv = fresh_server(ROCKTIMER_WRITER_QUEUE_SIZE="4")
    assert srv.proc is not None
    pid = srv.proc.pid
    accepted: list[str] = []
    refused = 0

    async def burst(n: int) -> None:
        nonlocal refused
        limits = httpx.Limits(max_connections=BURST, max_keepalive_connections=BURST)
        async with httpx.AsyncClient(base_url=srv.url, timeout=60, limits=limits) as c:
            sends = [
                c.post(
                    "/v1/topics/burst/messages",
                    json={"msg_id": f"b{n}-{i}", "body": "x", "delay_ms": 500},
                )
                for i in range(BURST)
            ]
            for r in await asyncio.gather(*sends):
                if r.status_code == 201:
                    accepted.append(r.json()["msg_id"])
                else:
                    assert r.status_code == 429, r.text
                    assert r.headers["content-type"] == "application/problem+json"
                    assert int(r.headers["retry-after"]) >= 1
                    refused += 1

    for n in range(BURSTS):
        asyncio.run(burst(n))
        assert status_kib(pid, "VmRSS") < RSS_LIMIT_KB
        if refused:
            break
    assert refused > 0, "a burst far beyond the queue must be refused in part"
    assert accepted, "and in part accepted"
    assert status_kib(pid, "VmHWM") < RSS_LIMIT_KB
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        got = receive_all(c, "burst", "g", len(accepted), timeout_s=20)
    assert sorted(m["msg_id"] for m in got) == sorted(accepted)


def test_two_thousand_long_polls_return_on_time(fresh_server: Callable[..., Server]) -> None:
    srv = fresh_server()
    assert srv.proc is not None
    pid = srv.proc.pid
    threads_before = status_kib(pid, "Threads")

    async def poll_all() -> list[float]:
        # bench's lean client: httpx spends seconds of CPU on 2,000 connections, which
        # would measure the client, not the server.
        conns = await asyncio.gather(
            *(Connection.open("127.0.0.1", srv.port) for _ in range(LONG_POLLS))
        )
        authority = f"127.0.0.1:{srv.port}"

        async def poll(i: int, conn: Connection) -> float:
            raw = build_request(
                "POST",
                authority,
                f"/v1/topics/quiet/groups/g{i % 50}/receive",
                json={"wait_ms": WAIT_MS},
            )
            started = time.monotonic()
            r = await conn.request(raw, timeout_s=60)
            assert r.status == 200, r.body
            assert r.json()["messages"] == []
            return time.monotonic() - started

        try:
            return list(await asyncio.gather(*(poll(i, c) for i, c in enumerate(conns))))
        finally:
            for conn in conns:
                conn.close()

    durations = asyncio.run(poll_all())
    assert len(durations) == LONG_POLLS
    assert max(durations) < WAIT_MS / 1000 + MARGIN_S, max(durations)
    assert min(durations) >= WAIT_MS / 1000 - 0.05, "a long poll returned early and empty"
    assert status_kib(pid, "Threads") <= threads_before + 2, "long polls must not take threads"
    assert status_kib(pid, "VmHWM") < RSS_LIMIT_KB


def test_sigterm_drains_and_restart_continues(
    fresh_server: Callable[..., Server], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    srv = fresh_server(data, ROCKTIMER_LOG_LEVEL="info")  # "stopped cleanly" is at INFO
    due = now_ms() + 3_000
    accepted: list[str] = []

    async def send_many() -> None:
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as c:
            sends = [
                c.post(
                    "/v1/topics/term/messages",
                    json={"msg_id": f"s{i}", "body": "x", "deliver_at_ms": due},
                )
                for i in range(300)
            ]
            for r in await asyncio.gather(*sends):
                assert r.status_code == 201
                accepted.append(r.json()["msg_id"])

    asyncio.run(send_many())
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        c.post("/v1/topics/term-now/messages", json={"msg_id": "now", "body": "x"})
        held = c.post("/v1/topics/term-now/groups/g/receive", json={"invisible_ms": 60_000})
        assert [m["msg_id"] for m in held.json()["messages"]] == ["now"]
        receipt = held.json()["messages"][0]["receipt"]
        ack = c.post("/v1/topics/term-now/groups/g/ack", json={"receipts": [receipt]})
        assert ack.json()["results"][0]["status"] == "acked"
    assert srv.terminate() in (0, -15)  # uvicorn re-raises SIGTERM after a clean shutdown
    assert "stopped cleanly" in srv.logs()
    assert "Traceback" not in srv.logs()
    again = fresh_server(data)
    with httpx.Client(base_url=again.url, timeout=30) as c:
        got = receive_all(c, "term", "g", len(accepted), timeout_s=15)
        assert sorted(m["msg_id"] for m in got) == sorted(accepted)
        assert c.get("/v1/topics/term-now/groups/g/messages/now").json()["state"] == "acked"
        after = c.post("/v1/topics/term-now/groups/g/receive", json={"wait_ms": 200})
        assert after.json()["messages"] == [], "an acked message never returns"
