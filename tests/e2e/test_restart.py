"""Crash safety: SIGKILL the real server mid-stream, start it again, count every message."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.conftest import now_ms, receive_all
from tests.support.server import Server


def receive_settled(
    c: httpx.Client, topic: str, wanted: set[str], all_due_ms: int, timeout_s: float = 30
) -> list[dict[str, Any]]:
    """Receive (and ack) until every wanted msg_id came, everything is due, and one more
    long poll found nothing: what arrives late is waited for, not reported lost."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = receive_all(c, topic, "g", 1, timeout_s=1)
        got += batch
        if not batch and now_ms() > all_due_ms and wanted <= {m["msg_id"] for m in got}:
            break
    return got


def test_sigkill_mid_stream_loses_and_duplicates_nothing(
    fresh_server: Callable[..., Server], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    srv = fresh_server(data)
    topic = "orders"
    acknowledged: dict[str, int] = {}  # msg_id -> status of the reply
    attempted: set[str] = set()
    lock = threading.Lock()
    start = now_ms()
    rng = random.Random(3)
    plan = [(f"m{i:03d}", start + rng.randrange(-500, 2_500)) for i in range(250)]

    def producer(part: list[tuple[str, int]]) -> None:
        with httpx.Client(base_url=srv.url, timeout=5) as c:
            for msg_id, due in part:
                with lock:
                    attempted.add(msg_id)
                try:
                    r = c.post(
                        f"/v1/topics/{topic}/messages",
                        json={"msg_id": msg_id, "body": msg_id, "deliver_at_ms": due},
                    )
                except httpx.TransportError:
                    return  # the server died under us
                assert r.status_code in (200, 201), r.text
                with lock:
                    acknowledged[msg_id] = r.status_code

    threads = [threading.Thread(target=producer, args=(plan[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(acknowledged) < 120 and time.monotonic() < deadline:
        time.sleep(0.005)
    srv.kill()
    for t in threads:
        t.join()
    assert 120 <= len(acknowledged) < 250, "the kill should land mid-stream"

    again = fresh_server(data)
    with httpx.Client(base_url=again.url, timeout=30) as c:
        got = receive_settled(c, topic, set(acknowledged), all_due_ms=start + 2_500)
    ids = [m["msg_id"] for m in got]
    assert len(ids) == len(set(ids)), "a message was delivered twice"
    assert set(acknowledged) <= set(ids), "a send that got 201 was lost"
    assert set(ids) <= attempted, "a message that was never sent appeared"


def test_clean_restart_keeps_timers_and_state(
    fresh_server: Callable[..., Server], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    srv = fresh_server(data)
    due = now_ms() + 2_500
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        for i in range(5):
            r = c.post(
                "/v1/topics/t/messages", json={"msg_id": f"k{i}", "body": "x", "deliver_at_ms": due}
            )
            assert r.status_code == 201
        assert c.delete("/v1/topics/t/messages/k4").status_code == 200
        far = {"msg_id": "far", "body": "x", "deliver_at_ms": due + 86_400_000}
        assert c.post("/v1/topics/t/messages", json=far).status_code == 201
    # uvicorn re-raises SIGTERM after its graceful shutdown, so -15 is a clean exit too.
    assert srv.terminate() in (0, -15)
    assert "Traceback" not in srv.logs()
    again = fresh_server(data)
    with httpx.Client(base_url=again.url, timeout=30) as c:
        # Not due for a day, whatever the restart took on a slow machine: still a timer.
        assert c.get("/v1/topics/t/messages/far").json()["state"] == "scheduled"
        got = receive_all(c, "t", "g", 4, timeout_s=10)
        assert sorted(m["msg_id"] for m in got) == ["k0", "k1", "k2", "k3"]
        assert c.get("/v1/topics/t/messages/k4").json()["state"] == "cancelled"
        assert (
            c.post("/v1/topics/t/messages", json={"msg_id": "k4", "body": "x"}).status_code == 409
        )


def _sealer_of(server_pid: int) -> int | None:
    """The pid of the server's sealer process (workers/sealer.py), if it has one."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == server_pid and b"workers.sealer" in cmdline:
            return int(entry.name)
    return None


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie left for its new parent to reap."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def test_the_sealer_process_ends_with_its_server(fresh_server: Callable[..., Server]) -> None:
    """Killed (SIGKILL: no shutdown code runs) or stopped (SIGTERM), the server leaves no
    sealer behind: the child ends when its stdin does."""
    for stop in ("kill", "terminate"):
        srv = fresh_server(ROCKTIMER_EVENTS_SEAL_MS="50")
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            assert c.post("/v1/topics/t/messages", json={"body": stop}).status_code == 201
        deadline = time.monotonic() + 20
        while (child := _sealer_of(srv.pid)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child is not None, "the first seal starts the sealer"
        getattr(srv, stop)()
        deadline = time.monotonic() + 10
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child), f"the sealer outlived its server ({stop})"
        assert (srv.data_dir / "events").is_dir()
