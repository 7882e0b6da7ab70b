"""Receive, long poll, ack and redelivery after invisibility, over real HTTP."""

from __future__ import annotations

import base64
import threading
import time

import httpx

from tests.e2e.conftest import now_ms


def receive(client: httpx.Client, topic: str, group: str, **body: int) -> list[dict[str, object]]:
    r = client.post(f"/v1/topics/{topic}/groups/{group}/receive", json=body)
    assert r.status_code == 200, r.text
    messages: list[dict[str, object]] = r.json()["messages"]
    return messages


def ack(client: httpx.Client, topic: str, group: str, *receipts: object) -> list[str]:
    r = client.post(f"/v1/topics/{topic}/groups/{group}/ack", json={"receipts": list(receipts)})
    assert r.status_code == 200, r.text
    return [x["status"] for x in r.json()["results"]]


def wait_parked(client: httpx.Client, n: int, timeout_s: float = 10) -> None:
    """Until ``n`` long polls wait on the server (its rocktimer_long_polls gauge)."""
    deadline = time.monotonic() + timeout_s
    while f"rocktimer_long_polls {float(n)}" not in client.get("/metrics").text:
        assert time.monotonic() < deadline, f"{n} long polls never parked"
        time.sleep(0.01)


def test_receive_then_ack_is_never_seen_again(client: httpx.Client, topic: str) -> None:
    client.post(f"/v1/topics/{topic}/messages", json={"msg_id": "a", "body": "hello", "tag": "t1"})
    got = receive(client, topic, "g", invisible_ms=1000)
    assert len(got) == 1
    m = got[0]
    assert (m["msg_id"], m["body"], m["attempt"], m["tag"]) == ("a", "hello", 1, "t1")
    assert ack(client, topic, "g", m["receipt"]) == ["acked"]
    assert ack(client, topic, "g", m["receipt"]) == ["acked"], "a repeated ack is idempotent"
    # A long poll past the invisibility: an acked message that came back would end it.
    assert receive(client, topic, "g", wait_ms=1_500) == []


def test_unacked_message_returns_with_next_attempt_and_old_receipt_expires(
    client: httpx.Client, topic: str
) -> None:
    client.post(f"/v1/topics/{topic}/messages", json={"msg_id": "a", "body": "x"})
    first = receive(client, topic, "g", invisible_ms=1000)
    assert [m["attempt"] for m in first] == [1]
    assert receive(client, topic, "g") == [], "invisible while held"
    started = time.monotonic()
    again = receive(client, topic, "g", wait_ms=5000, invisible_ms=1000)
    assert [(m["msg_id"], m["attempt"]) for m in again] == [("a", 2)]
    assert time.monotonic() - started < 4, "the long poll wakes when the message is visible"
    assert again[0]["receipt"] != first[0]["receipt"]
    assert ack(client, topic, "g", first[0]["receipt"]) == ["expired"]
    assert ack(client, topic, "g", again[0]["receipt"]) == ["acked"]


def test_ack_of_garbage_or_foreign_receipt_is_unknown(client: httpx.Client, topic: str) -> None:
    client.post(f"/v1/topics/{topic}/messages", json={"msg_id": "a", "body": "x"})
    m = receive(client, topic, "g")[0]
    assert ack(client, topic, "other-group", m["receipt"]) == ["unknown"]
    assert ack(client, topic, "g", "not-a-receipt", m["receipt"]) == ["unknown", "acked"]


def test_groups_each_receive_every_message(client: httpx.Client, topic: str) -> None:
    for i in range(3):
        client.post(f"/v1/topics/{topic}/messages", json={"msg_id": f"m{i}", "body": "x"})
    a = [m["msg_id"] for m in receive(client, topic, "ga", max_messages=10)]
    b = [m["msg_id"] for m in receive(client, topic, "gb", max_messages=2)]
    b += [m["msg_id"] for m in receive(client, topic, "gb", max_messages=10)]
    assert a == b == ["m0", "m1", "m2"]


def test_long_poll_returns_when_a_timer_falls_due(client: httpx.Client, topic: str) -> None:
    due = now_ms() + 700
    client.post(
        f"/v1/topics/{topic}/messages", json={"msg_id": "a", "body": "x", "deliver_at_ms": due}
    )
    got = receive(client, topic, "g", wait_ms=10_000)
    received_at = now_ms()
    assert [m["msg_id"] for m in got] == ["a"]
    assert due <= received_at < due + 2_000


def test_long_poll_times_out_empty(client: httpx.Client, topic: str) -> None:
    started = time.monotonic()
    assert receive(client, topic, "g", wait_ms=300) == []
    assert 0.25 <= time.monotonic() - started < 5


def test_waiting_receivers_share_a_message_once(
    client: httpx.Client, topic: str, server_url: str
) -> None:
    results: list[list[dict[str, object]]] = []

    def poll() -> None:
        with httpx.Client(base_url=server_url, timeout=30) as c:
            results.append(receive(c, topic, "g", wait_ms=3000))

    threads = [threading.Thread(target=poll) for _ in range(4)]
    for t in threads:
        t.start()
    wait_parked(client, 4)
    client.post(f"/v1/topics/{topic}/messages", json={"msg_id": "only", "body": "x"})
    for t in threads:
        t.join()
    delivered = [m["msg_id"] for batch in results for m in batch]
    assert delivered == ["only"], "within a group each message goes to one receiver"


def test_base64_body_round_trips(client: httpx.Client, topic: str) -> None:
    raw = bytes(range(256))
    body = base64.b64encode(raw).decode()
    r = client.post(
        f"/v1/topics/{topic}/messages",
        json={"msg_id": "bin", "body": body, "body_encoding": "base64"},
    )
    assert r.status_code == 201
    m = receive(client, topic, "g")[0]
    assert m["body_encoding"] == "base64"
    assert isinstance(m["body"], str)
    assert base64.b64decode(m["body"]) == raw
