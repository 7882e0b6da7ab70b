"""Browsing (api.md, Browsing) on a real server: topics and their counts, a topic's groups,
its scheduled messages; counts stay right across restarts and a SIGKILL mid-stream."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.conftest import receive_all
from tests.support.server import Server

HOUR_MS = 3_600_000


def send(c: httpx.Client, topic: str, msg_id: str, **when: int) -> httpx.Response:
    r = c.post(f"/v1/topics/{topic}/messages", json={"msg_id": msg_id, "body": msg_id, **when})
    assert r.status_code in (200, 201), r.text
    return r


def pages(c: httpx.Client, path: str, **params: Any) -> list[dict[str, Any]]:
    """Every item of a listing, following next_cursor (bounded)."""
    items: list[dict[str, Any]] = []
    for _ in range(100):
        r = c.get(path, params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        items.extend(page["items"])
        if "next_cursor" not in page:
            return items
        params["cursor"] = page["next_cursor"]
    raise AssertionError(f"{path}: more than 100 pages")


def topic_counts(c: httpx.Client) -> dict[str, tuple[int, int, int]]:
    return {
        t["topic"]: (t["scheduled"], t["delivered"], t["cancelled"])
        for t in pages(c, "/v1/topics", limit=2)
    }


def groups(c: httpx.Client, topic: str) -> dict[str, dict[str, Any]]:
    return {g.pop("group"): g for g in pages(c, f"/v1/topics/{topic}/groups", limit=1)}


def test_topics_groups_and_scheduled_messages_with_their_counts(
    fresh_server: Callable[..., Server], tmp_path: Path
) -> None:
    srv = fresh_server()
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        for i, delay in enumerate((3 * HOUR_MS, HOUR_MS, 2 * HOUR_MS)):
            send(c, "orders", f"later-{i}", delay_ms=delay)
        send(c, "orders", "now-0")
        send(c, "orders", "past-0", deliver_at_ms=0)
        send(c, "orders", "later-0", delay_ms=5)  # a re-send counts nothing
        assert c.delete("/v1/topics/orders/messages/later-2").status_code == 200
        assert c.delete("/v1/topics/orders/messages/later-2").status_code == 200  # idempotent
        batch = [{"msg_id": f"b{i}", "body": "x", "delay_ms": HOUR_MS} for i in range(5)]
        assert c.post("/v1/topics/billing/messages/batch", json={"messages": batch}).is_success
        for i in range(3):  # due soon: moved by the deliverer
            send(c, "orders", f"soon-{i}", delay_ms=200)
        assert len(receive_all(c, "orders", "audit", 5, ack=False, invisible_ms=HOUR_MS)) == 5

        assert topic_counts(c) == {"billing": (5, 0, 0), "orders": (2, 5, 1)}

        scheduled = pages(c, "/v1/topics/orders/messages", state="scheduled", limit=1)
        assert [m["msg_id"] for m in scheduled] == ["later-1", "later-0"]  # due order
        assert {m["state"] for m in scheduled} == {"scheduled"}
        assert scheduled[0]["deliver_at_ms"] < scheduled[1]["deliver_at_ms"]
        assert scheduled[0] == c.get("/v1/topics/orders/messages/later-1").json()
        assert len(pages(c, "/v1/topics/billing/messages")) == 5

        # Groups: audit holds 5; worker gets a retrying one and a dead one; ops only has
        # settings (a PUT makes a group).
        ack_one = receive_all(
            c, "orders", "worker", 3, ack=False, max_messages=3, invisible_ms=HOUR_MS
        )
        r = c.put("/v1/topics/orders/groups/worker", json={"max_attempts": 2})
        assert r.status_code == 200
        c.post("/v1/topics/orders/groups/worker/ack", json={"receipts": [ack_one[0]["receipt"]]})
        nack = {"receipts": [ack_one[1]["receipt"]], "delay_ms": HOUR_MS}
        assert c.post("/v1/topics/orders/groups/worker/nack", json=nack).is_success
        c.put("/v1/topics/orders/groups/worker", json={"max_attempts": 1})
        nack = {"receipts": [ack_one[2]["receipt"]]}
        assert c.post("/v1/topics/orders/groups/worker/nack", json=nack).is_success
        assert c.put("/v1/topics/orders/groups/ops", json={"max_attempts": 3}).is_success

        expected = {
            "audit": {"backlog": 0, "inflight": 5, "retrying": 0, "dead": 0},
            "ops": {"backlog": 5, "inflight": 0, "retrying": 0, "dead": 0},
            "worker": {"backlog": 2, "inflight": 0, "retrying": 1, "dead": 1},
        }
        found = groups(c, "orders")
        assert {g: {k: v[k] for k in expected[g]} for g, v in found.items()} == expected
        assert {(v["filter"], v.get("push")) for v in found.values()} == {("*", None)}
        assert not any("push" in v for v in found.values())  # push? : left out, not null
        assert topic_counts(c)["%DLQ%worker"] == (0, 1, 0)

    srv.terminate()
    again = fresh_server(srv.data_dir)
    with httpx.Client(base_url=again.url, timeout=30) as c:
        assert topic_counts(c)["orders"] == (2, 5, 1)
        assert {g: {k: v[k] for k in expected[g]} for g, v in groups(c, "orders").items()} == (
            expected
        )


def test_bad_cursors_and_states_are_422_naming_the_field(server_url: str, topic: str) -> None:
    with httpx.Client(base_url=server_url, timeout=30) as c:
        send(c, topic, "a", delay_ms=HOUR_MS)
        send(c, topic, "b", delay_ms=HOUR_MS + 1)
        page = c.get(f"/v1/topics/{topic}/messages", params={"limit": 1}).json()
        cursor = page["next_cursor"]
        for path, params in [
            ("/v1/topics", {"cursor": "!!!"}),
            ("/v1/topics", {"cursor": "_w"}),  # decodes to a byte that is no name
            (f"/v1/topics/{topic}/groups", {"cursor": "AA"}),
            (f"/v1/topics/{topic}/messages", {"cursor": "AAAA"}),
            ("/v1/topics/other/messages", {"cursor": cursor}),  # another topic's cursor
            (f"/v1/topics/{topic}/messages", {"state": "delivered"}),
            ("/v1/topics", {"limit": 0}),
        ]:
            r = c.get(path, params=params)
            assert r.status_code == 422, (path, params, r.text)
            assert r.headers["content-type"] == "application/problem+json"
            field = next(iter(params))
            assert r.json()["errors"][0]["field"] == field, r.text


def test_counts_match_every_message_after_a_sigkill_mid_stream(
    fresh_server: Callable[..., Server], tmp_path: Path
) -> None:
    srv = fresh_server()
    replies: dict[str, int] = {}
    stop = threading.Event()

    def producer(part: int) -> None:
        with httpx.Client(base_url=srv.url, timeout=5) as c:
            for i in range(400):
                msg_id = f"p{part}-{i}"
                body = {"msg_id": msg_id, "body": "x", "delay_ms": (i % 3) * HOUR_MS}
                try:
                    c.post("/v1/topics/storm/messages", json=body)
                    if i % 5 == 1:  # cancel some of the scheduled ones
                        c.delete(f"/v1/topics/storm/messages/{msg_id}")
                except httpx.TransportError:
                    return
                replies[msg_id] = i
                if stop.is_set():
                    return

    threads = [threading.Thread(target=producer, args=(p,)) for p in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(replies) < 150 and time.monotonic() < deadline:
        time.sleep(0.005)
    srv.kill()
    stop.set()
    for t in threads:
        t.join()

    again = fresh_server(srv.data_dir)
    with httpx.Client(base_url=again.url, timeout=30) as c:
        states: Counter[str] = Counter()
        for part in range(3):
            for i in range(400):
                r = c.get(f"/v1/topics/storm/messages/p{part}-{i}")
                if r.status_code == 200:
                    states[r.json()["state"]] += 1
        assert states["scheduled"] > 0
        assert states["delivered"] > 0
        assert topic_counts(c)["storm"] == (
            states["scheduled"],
            states["delivered"],
            states["cancelled"],
        )
        assert len(pages(c, "/v1/topics/storm/messages", limit=1000)) == states["scheduled"]
