"""Disk full: the data dir on a small tmpfs. Writes answer 503 (not 500, no crash loop),
reads and receives keep working, freeing space lets writes resume, nothing acknowledged is
lost and the store opens again without repair."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import receive_all
from tests.support.server import Server

TMPFS_BYTES = 64 * 1024 * 1024
BODY = "x" * 4_000  # 4 kB bodies fill 64 MiB in a few thousand sends
SEND_LIMIT = 40_000  # a bound on the filling loop, far beyond what 64 MiB holds
FILLER_BYTES = 32 * 1024 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill_until_refused(c: httpx.Client, topic: str, accepted: list[str]) -> httpx.Response:
    """Send (batches of 100) until the service refuses; every 201 goes into ``accepted``."""
    for i in range(0, SEND_LIMIT, 100):
        items = [{"msg_id": f"f{i + j}", "body": BODY, "delay_ms": 3_600_000} for j in range(100)]
        r = c.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items})
        if r.status_code != 200:
            return r
        results = r.json()["results"]
        accepted += [x["msg_id"] for x in results if x["status"] == 201]
        refused = [x for x in results if x["status"] != 201]
        if refused:
            return c.post(f"/v1/topics/{topic}/messages", json={"body": BODY})
    raise AssertionError("the disk never filled up")


@pytest.mark.parametrize("reserve", ["guarded", "exhausted"])
def test_disk_full_refuses_writes_keeps_reads_and_recovers(
    small_disk: Path, fresh_server: Callable[..., Server], reserve: str
) -> None:
    # guarded: the free-space reserve refuses sends before RocksDB sees ENOSPC.
    # exhausted: no reserve, RocksDB's WAL write fails; the writer reopens the store.
    min_free = str(8 * 1024 * 1024) if reserve == "guarded" else "0"
    filler = small_disk / "filler"  # what an operator frees to make room again
    filler.write_bytes(b"\0" * FILLER_BYTES)
    srv = fresh_server(small_disk / "data", ROCKTIMER_MIN_FREE_BYTES=min_free)
    accepted: list[str] = []
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        for i in range(5):
            assert (
                c.post(
                    "/v1/topics/ready/messages", json={"msg_id": f"r{i}", "body": "x"}
                ).status_code
                == 201
            )
        refused = fill_until_refused(c, "fill", accepted)
        assert refused.status_code == 503, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert int(refused.headers["retry-after"]) >= 1
        assert len(accepted) > 100
        # Reads and receives keep working while full.
        assert c.get(f"/v1/topics/fill/messages/{accepted[0]}").json()["state"] == "scheduled"
        assert c.get("/healthz").status_code == 200
        got = c.post("/v1/topics/ready/groups/g/receive", json={"max_messages": 10})
        if reserve == "guarded":
            assert got.status_code == 200
            assert len(got.json()["messages"]) == 5
        else:
            assert got.status_code in (200, 503), got.text
        # Free space: writes resume.
        filler.unlink()
        resumed = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            resumed = c.post("/v1/topics/after/messages", json={"msg_id": "after", "body": "x"})
            if resumed.status_code == 201:
                break
            time.sleep(0.5)
        assert resumed is not None
        if resumed.status_code != 201:
            pytest.fail(
                f"writes did not resume after freeing space: {resumed.text}\n{srv.logs()[-3000:]}"
            )
    srv.kill()
    # Nothing acknowledged is lost; the store opens without repair.
    again = fresh_server(small_disk / "data", ROCKTIMER_MIN_FREE_BYTES="0")
    with httpx.Client(base_url=again.url, timeout=30) as c:
        for msg_id in accepted[:: max(1, len(accepted) // 200)] + accepted[-20:]:
            assert c.get(f"/v1/topics/fill/messages/{msg_id}").json()["state"] == "scheduled"
        assert c.get("/v1/topics/after/messages/after").json()["state"] == "delivered"
        ready = receive_all(c, "ready", "g2", 5, timeout_s=5)
        assert sorted(m["msg_id"] for m in ready) == [f"r{i}" for i in range(5)]
