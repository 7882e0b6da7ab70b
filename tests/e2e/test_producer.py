"""Send, batch send, status and cancel over real HTTP (api.md, Producer)."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.e2e.conftest import now_ms, receive_all

TEN_YEARS_MS = 315_576_000_000


def send(client: httpx.Client, topic: str, **body: object) -> httpx.Response:
    return client.post(f"/v1/topics/{topic}/messages", json={"body": "b", **body})


def test_past_deliver_time_is_delivered_at_once(client: httpx.Client, topic: str) -> None:
    r = send(client, topic, msg_id="late", deliver_at_ms=now_ms() - 60_000)
    assert r.status_code == 201
    assert r.json()["state"] == "delivered"
    status = client.get(f"/v1/topics/{topic}/messages/late").json()
    assert status["state"] == "delivered"
    assert status["delivered_at_ms"] >= status["created_at_ms"]
    got = receive_all(client, topic, "g", 1, timeout_s=5)
    assert [m["msg_id"] for m in got] == ["late"]


def test_ten_year_delay_accepted_and_beyond_refused(client: httpx.Client, topic: str) -> None:
    ok = send(client, topic, msg_id="far", delay_ms=TEN_YEARS_MS)
    assert ok.status_code == 201
    assert ok.json()["deliver_at_ms"] - ok.json()["created_at_ms"] >= TEN_YEARS_MS - 1000
    too_far = send(client, topic, msg_id="farther", deliver_at_ms=now_ms() + TEN_YEARS_MS + 60_000)
    assert too_far.status_code == 422
    assert too_far.headers["content-type"] == "application/problem+json"
    assert too_far.json()["errors"][0]["field"] == "deliver_at_ms"
    assert client.get(f"/v1/topics/{topic}/messages/farther").status_code == 404


def test_delay_level_uses_rocketmq_table(client: httpx.Client, topic: str) -> None:
    r = send(client, topic, msg_id="lvl", delay_level=3)  # level 3 = 10 s
    body = r.json()
    assert r.status_code == 201
    assert body["deliver_at_ms"] - body["created_at_ms"] in range(9_000, 10_001)


def test_five_due_same_ms_one_cancelled_four_delivered(client: httpx.Client, topic: str) -> None:
    due = now_ms() + 800
    for i in range(5):
        assert send(client, topic, msg_id=f"m{i}", deliver_at_ms=due).status_code == 201
    assert client.delete(f"/v1/topics/{topic}/messages/m2").status_code == 200
    got = receive_all(client, topic, "g", 5, timeout_s=4)
    assert sorted(m["msg_id"] for m in got) == ["m0", "m1", "m3", "m4"]
    assert all(m["delivered_at_ms"] >= due for m in got)


def test_same_msg_id_in_two_topics_is_two_messages(client: httpx.Client, topic: str) -> None:
    other = topic + "-b"
    due = now_ms() + 500
    assert send(client, topic, msg_id="x", deliver_at_ms=due, body="one").status_code == 201
    assert send(client, other, msg_id="x", deliver_at_ms=due, body="two").status_code == 201
    assert client.delete(f"/v1/topics/{topic}/messages/x").status_code == 200
    got = receive_all(client, other, "g", 1, timeout_s=5)
    assert [(m["msg_id"], m["body"]) for m in got] == [("x", "two")]
    assert client.get(f"/v1/topics/{topic}/messages/x").json()["state"] == "cancelled"
    assert client.get(f"/v1/topics/{other}/messages/x").json()["state"] == "delivered"


def test_cancel_and_resend_rules(client: httpx.Client, topic: str) -> None:
    base = f"/v1/topics/{topic}/messages"
    assert client.delete(f"{base}/nobody").status_code == 404
    assert send(client, topic, msg_id="now").json()["state"] == "delivered"
    gone = client.delete(f"{base}/now")
    assert gone.status_code == 409
    assert gone.headers["content-type"] == "application/problem+json"
    first = send(client, topic, msg_id="later", delay_ms=60_000, body="first")
    assert first.status_code == 201
    again = send(client, topic, msg_id="later", delay_ms=5, body="second")
    assert again.status_code == 200
    assert again.json() == first.json()
    c1 = client.delete(f"{base}/later")
    c2 = client.delete(f"{base}/later")
    assert c1.status_code == c2.status_code == 200
    assert c1.json() == c2.json()
    assert c1.json()["state"] == "cancelled"
    assert send(client, topic, msg_id="later").status_code == 409
    status = client.get(f"{base}/later").json()
    assert status["state"] == "cancelled"
    assert status["cancelled_at_ms"] == c1.json()["cancelled_at_ms"]


def test_status_reports_tag_and_properties(client: httpx.Client, topic: str) -> None:
    r = send(client, topic, msg_id="p", delay_ms=60_000, tag="blue", properties={"k": "v"})
    assert r.status_code == 201
    view = client.get(f"/v1/topics/{topic}/messages/p").json()
    assert view["state"] == "scheduled"
    assert view["tag"] == "blue"
    assert view["properties"] == {"k": "v"}


def test_server_makes_a_msg_id_when_none_is_given(client: httpx.Client, topic: str) -> None:
    a = send(client, topic).json()["msg_id"]
    b = send(client, topic).json()["msg_id"]
    assert a != b
    assert len(a) == 32
    assert int(a[:12], 16) <= int(b[:12], 16) <= now_ms(), "ids start with their millisecond"


def test_batch_stores_valid_items_and_reports_invalid_ones(
    client: httpx.Client, topic: str
) -> None:
    send(client, topic, msg_id="dead", delay_ms=60_000)
    client.delete(f"/v1/topics/{topic}/messages/dead")
    items = [
        {"msg_id": "ok1", "body": "a", "delay_ms": 60_000},
        {"msg_id": "bad id!", "body": "a"},
        {"msg_id": "ok2", "body": "b"},
        {"msg_id": "two", "body": "c", "delay_ms": 1, "delay_level": 1},
        {"msg_id": "dead", "body": "d"},
        {"msg_id": "ok1", "body": "again"},
        {"msg_id": "b64", "body": "not base64!", "body_encoding": "base64"},
    ]
    r = client.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items})
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["index"] for x in results] == list(range(len(items)))
    assert [x["status"] for x in results] == [201, 422, 201, 422, 409, 200, 422]
    assert "msg_id" in results[1]["error"]
    assert "delay_level" in results[3]["error"]
    assert "body" in results[6]["error"]
    assert client.get(f"/v1/topics/{topic}/messages/ok1").json()["state"] == "scheduled"
    assert client.get(f"/v1/topics/{topic}/messages/ok2").json()["state"] == "delivered"
    assert client.get(f"/v1/topics/{topic}/messages/two").status_code == 404


def test_thousand_messages_each_once_in_due_order(client: httpx.Client, topic: str) -> None:
    start = now_ms() + 300
    rng = random.Random(7)
    dues = {f"m{i:04d}": start + rng.randrange(0, 2_000) for i in range(1000)}
    items = [{"msg_id": k, "body": k, "deliver_at_ms": v} for k, v in dues.items()]
    at_once: set[str] = set()  # already due when they arrived (a slow machine): they enter then
    for i in range(0, 1000, 250):
        r = client.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items[i : i + 250]})
        assert {x["status"] for x in r.json()["results"]} == {201}
        at_once |= {x["msg_id"] for x in r.json()["results"] if x["state"] == "delivered"}
    got = receive_all(client, topic, "g", 1000, timeout_s=20)
    ids = [m["msg_id"] for m in got]
    assert len(ids) == 1000
    assert set(ids) == set(dues)
    order = [dues[i] for i in ids if i not in at_once]
    assert len(order) > 500, "the machine was too slow for this test to check the order"
    assert order == sorted(order), "a topic's log must be in deliver_at order"
    extra = client.post(f"/v1/topics/{topic}/groups/g/receive", json={"wait_ms": 300}).json()
    assert extra["messages"] == []


def test_cancel_racing_delivery_never_delivers_a_cancelled_message(
    client: httpx.Client, topic: str, server_url: str
) -> None:
    due = now_ms() + 600
    n = 600
    items = [{"msg_id": f"r{i}", "body": "x", "deliver_at_ms": due} for i in range(n)]
    r = client.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items})
    assert {x["status"] for x in r.json()["results"]} == {201}
    while now_ms() < due - 5:
        time.sleep(0.001)

    def cancel(i: int) -> tuple[str, int]:
        with httpx.Client(base_url=server_url, timeout=30) as c:
            return f"r{i}", c.delete(f"/v1/topics/{topic}/messages/r{i}").status_code

    with ThreadPoolExecutor(8) as pool:
        outcomes = dict(pool.map(cancel, range(0, n, 2)))
    assert set(outcomes.values()) <= {200, 409}
    cancelled = {k for k, code in outcomes.items() if code == 200}
    got = {m["msg_id"] for m in receive_all(client, topic, "g", n - len(cancelled))}
    late = receive_all(client, topic, "g", 1, timeout_s=1)  # long polls: a late one ends them
    got |= {m["msg_id"] for m in late}
    assert not got & cancelled, "a message whose cancel got 200 was delivered"
    assert got == {f"r{i}" for i in range(n)} - cancelled


def test_reschedule_over_http(client: httpx.Client, topic: str) -> None:
    url = f"/v1/topics/{topic}/messages"
    far = now_ms() + 3_600_000
    assert send(client, topic, msg_id="r", deliver_at_ms=far).status_code == 201
    later = client.patch(f"{url}/r", json={"delay_ms": 7_200_000})
    assert later.status_code == 200
    body = later.json()
    assert body["state"] == "scheduled"
    assert body["deliver_at_ms"] >= far + 3_590_000
    assert client.get(f"{url}/r").json()["deliver_at_ms"] == body["deliver_at_ms"]
    now = client.patch(f"{url}/r", json={"deliver_at_ms": 1})  # a past time: at once
    assert (now.status_code, now.json()["state"]) == (200, "delivered")
    assert [m["msg_id"] for m in receive_all(client, topic, "g", 1, timeout_s=5)] == ["r"]
    assert client.patch(f"{url}/r", json={"delay_ms": 5}).status_code == 409
    assert send(client, topic, msg_id="c", delay_ms=60_000).status_code == 201
    assert client.delete(f"{url}/c").status_code == 200
    assert client.patch(f"{url}/c", json={"delay_ms": 5}).status_code == 409
    missing = client.patch(f"{url}/nobody", json={"delay_ms": 5})
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"


def test_reschedule_bad_input(client: httpx.Client, topic: str) -> None:
    url = f"/v1/topics/{topic}/messages"
    assert send(client, topic, msg_id="b", delay_ms=60_000).status_code == 201
    cases = [
        ({}, "deliver_at_ms"),
        ({"delay_ms": 1, "delay_level": 2}, "delay_level"),
        ({"delay_level": 19}, "delay_level"),
        ({"delay_ms": "5"}, "delay_ms"),
        ({"deliver_at_ms": now_ms() + TEN_YEARS_MS + 60_000}, "deliver_at_ms"),
        ({"delay_ms": 5, "body": "x"}, "body"),
    ]
    for payload, field in cases:
        r = client.patch(f"{url}/b", json=payload)
        assert r.status_code == 422, payload
        assert r.headers["content-type"] == "application/problem+json"
        assert field in r.text, (payload, r.text)
    assert (
        client.patch("/v1/topics/%25RETRY%25g/messages/b", json={"delay_ms": 5}).status_code == 422
    )
    assert client.patch(f"{url}/bad%20id", json={"delay_ms": 5}).status_code == 422
    assert client.get(f"{url}/b").json()["state"] == "scheduled"
