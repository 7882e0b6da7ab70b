"""Retry, dead letters and redrive over real HTTP; a SIGKILL in the middle of a retry cycle."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import Server


def group_url(topic: str, group: str) -> str:
    return f"/v1/topics/{topic}/groups/{group}"


def receive(c: httpx.Client, topic: str, group: str, wait_ms: int = 3_000) -> list[dict[str, Any]]:
    r = c.post(
        f"{group_url(topic, group)}/receive", json={"wait_ms": wait_ms, "invisible_ms": 20_000}
    )
    assert r.status_code == 200, r.text
    got: list[dict[str, Any]] = r.json()["messages"]
    return got


def nack(c: httpx.Client, topic: str, group: str, receipt: str, **extra: int) -> None:
    r = c.post(f"{group_url(topic, group)}/nack", json={"receipts": [receipt], **extra})
    assert r.json()["results"][0]["status"] == "nacked", r.text


def test_nacks_to_dlq_then_redrive_then_ack(client: httpx.Client, topic: str) -> None:
    # The group's dead letters are gathered from every topic: a group of its own, so the
    # session server's other tests cannot add theirs.
    g = f"g-{topic}"
    settings = {"max_attempts": 3, "retry": {"policy": "fixed", "interval_ms": 200}}
    put = client.put(group_url(topic, g), json=settings)
    assert put.status_code == 200
    assert client.get(group_url(topic, g)).json() == {**settings, "filter": "*", "push": None}
    client.post(f"/v1/topics/{topic}/messages", json={"msg_id": "m", "body": "hi"})
    for attempt in (1, 2, 3):
        got = receive(client, topic, g)
        assert [(m["msg_id"], m["attempt"]) for m in got] == [("m", attempt)]
        started = time.monotonic()
        nack(client, topic, g, got[0]["receipt"])
        if attempt < 3:
            view = client.get(f"{group_url(topic, g)}/messages/m").json()
            assert view["state"] in ("retrying", "pending")
            assert view["attempts"] == attempt
    assert time.monotonic() - started < 5
    view = client.get(f"{group_url(topic, g)}/messages/m").json()
    assert view["state"] == "dead"
    assert view["attempts"] == 3
    page = client.get(f"{group_url(topic, g)}/dlq").json()
    assert [(i["topic"], i["msg_id"], i["attempts"]) for i in page["items"]] == [(topic, "m", 3)]
    assert "next_cursor" not in page
    dlq = receive(client, f"%25DLQ%25{g}", "inspector", wait_ms=0)
    assert [(m["msg_id"], m["source_topic"]) for m in dlq] == [("m", topic)]
    assert receive(client, topic, g, wait_ms=300) == []

    r = client.post(f"{group_url(topic, g)}/dlq/m/redrive")
    assert r.status_code == 200
    assert client.post(f"{group_url(topic, g)}/dlq/m/redrive").status_code == 404
    again = receive(client, topic, g)
    assert [m["attempt"] for m in again] == [1]
    acked = client.post(f"{group_url(topic, g)}/ack", json={"receipts": [again[0]["receipt"]]})
    assert acked.json()["results"][0]["status"] == "acked"
    assert receive(client, topic, g, wait_ms=500) == []
    assert client.get(f"{group_url(topic, g)}/messages/m").json()["state"] == "acked"


def test_invisibility_change_over_http(client: httpx.Client, topic: str) -> None:
    client.post(f"/v1/topics/{topic}/messages", json={"msg_id": "m", "body": "x"})
    r = client.post(f"{group_url(topic, 'g')}/receive", json={"invisible_ms": 1_000})
    old = r.json()["messages"][0]["receipt"]
    new = client.post(
        f"{group_url(topic, 'g')}/invisibility", json={"receipt": old, "invisible_ms": 5_000}
    )
    assert new.status_code == 200
    # A long poll past the first deadline: it would answer the moment the message showed.
    assert receive(client, topic, "g", wait_ms=1_500) == [], "still held after the first deadline"
    stale = client.post(
        f"{group_url(topic, 'g')}/invisibility", json={"receipt": old, "invisible_ms": 5_000}
    )
    assert stale.status_code == 409
    assert stale.headers["content-type"] == "application/problem+json"
    unknown = client.post(
        f"{group_url(topic, 'g')}/invisibility", json={"receipt": "nope", "invisible_ms": 5_000}
    )
    assert unknown.status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 65}, "max_attempts"),
        ({"retry": {"policy": "fixed", "interval_ms": -5}}, "interval_ms"),
        ({"retry": {"policy": "exponential", "initial_ms": -1}}, "initial_ms"),
        ({"retry": {"policy": "sometimes"}}, "retry"),
        ({"retry": {"policy": "fixed", "bogus": 1}}, "bogus"),
        ({"filter": "TagA ||"}, "filter"),
        ({"filter": "TagA | TagB"}, "filter"),
    ],
)
def test_bad_group_settings_are_422(
    client: httpx.Client, topic: str, body: dict[str, Any], field: str
) -> None:
    r = client.put(group_url(topic, "g"), json=body)
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/problem+json"
    assert field in r.text


def test_dlq_cursor_must_be_ours(client: httpx.Client, topic: str) -> None:
    r = client.get(f"{group_url(topic, 'g')}/dlq", params={"cursor": "garbage!"})
    assert r.status_code == 422
    assert "cursor" in r.json()["detail"]


def test_sigkill_mid_retry_cycle_keeps_attempts_and_due_times(
    fresh_server: Callable[..., Server], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    srv = fresh_server(data)
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        # Long enough that a restart on a loaded machine ends before the retry is due.
        c.put(group_url("t", "g"), json={"retry": {"policy": "fixed", "interval_ms": 15_000}})
        c.post("/v1/topics/t/messages", json={"msg_id": "m", "body": "x"})
        got = receive(c, "t", "g", wait_ms=5_000)
        nack(c, "t", "g", got[0]["receipt"], delay_ms=0)  # back at once: attempt 2 now
        got = receive(c, "t", "g", wait_ms=5_000)
        nack(c, "t", "g", got[0]["receipt"])  # the policy's 15 s
        before = c.get(f"{group_url('t', 'g')}/messages/m").json()
    srv.kill()
    assert before["state"] == "retrying"
    assert before["attempts"] == 2
    again = fresh_server(data)
    with httpx.Client(base_url=again.url, timeout=40) as c:  # the long poll below: 25 s
        after = c.get(f"{group_url('t', 'g')}/messages/m").json()
        assert after == before, "attempts and the next visible time survive the crash"
        got = receive(c, "t", "g", wait_ms=25_000)
        received_at = time.time() * 1000
        assert [m["attempt"] for m in got] == [3]
        assert received_at >= before["next_visible_ms"]


def test_a_tag_filter_over_http(client: httpx.Client, topic: str) -> None:
    r = client.put(group_url(topic, "tags"), json={"filter": "TagA || TagB"})
    assert r.status_code == 200
    assert client.get(group_url(topic, "tags")).json()["filter"] == "TagA || TagB"
    for msg_id, tag in [("a", "TagA"), ("c", "TagC"), ("b", "TagB")]:
        sent = client.post(
            f"/v1/topics/{topic}/messages", json={"msg_id": msg_id, "body": "x", "tag": tag}
        )
        assert sent.status_code == 201
    got = receive(client, topic, "tags")
    assert [m["msg_id"] for m in got] == ["a", "b"]
    view = client.get(f"{group_url(topic, 'tags')}/messages/c").json()
    assert view["state"] == "filtered"


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("a b", "space"),
        ("TagA | TagB", "single '|'"),
        ("TagA ||", "empty tag"),
        ("*||a", "'*'"),
        ("a\u0000", "control character U+0000"),
        ("a||b\u0001", "control character U+0001"),
        ("x" * 129, "over 128 characters"),
    ],
)
def test_a_filter_that_could_never_match_is_422_in_words(
    client: httpx.Client, topic: str, expression: str, words: str
) -> None:
    """Issue 30.9: a filter naming a tag no message can carry (NUL) was stored, and a
    malformed one's 422 showed the raw regex."""
    r = client.put(group_url(topic, "g"), json={"filter": expression})
    assert r.status_code == 422, r.text
    reason = r.json()["errors"][0]["reason"]
    assert r.json()["errors"][0]["field"] == "filter"
    assert words in reason, reason
    assert "pattern" not in r.text, r.text
    assert "\\s" not in r.text, r.text
    assert client.get(group_url(topic, "g")).json()["filter"] == "*"


@pytest.mark.parametrize("tag", ["a||b", "a b", "a\u0000", "a*", " a", "a|b"])
def test_a_tag_no_filter_could_name_is_422(client: httpx.Client, topic: str, tag: str) -> None:
    """Issue 30.9: a message tagged so could be received only by a group without a filter."""
    for path, body in [
        (f"/v1/topics/{topic}/messages", {"body": "x", "tag": tag}),
        (f"/v1/topics/{topic}/schedules/s", {"every_ms": 60_000, "body": "x", "tag": tag}),
    ]:
        r = client.request("POST" if path.endswith("messages") else "PUT", path, json=body)
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["field"] == "tag", r.text
    assert client.get(f"/v1/topics/{topic}/messages", params={"state": "scheduled"}).json() == {
        "items": []
    }


@pytest.mark.parametrize(
    "internal", ["%25RETRY%25g", "%25INVISIBLE%25g", "%25SCHEDULE%25g", "%25TAG%25g"]
)
def test_group_settings_on_an_internal_topic_are_422(client: httpx.Client, internal: str) -> None:
    """Issue 30.9: settings on %RETRY%g were stored (200), and a push there idled on an
    internal lane."""
    r = client.put(group_url(internal, "x"), json={"max_attempts": 3})
    assert r.status_code == 422, r.text
    assert "internal" in r.json()["detail"]
    assert client.get(group_url(internal, "x")).status_code == 422
    dlq = client.put(group_url("%25DLQ%25g", "x"), json={"max_attempts": 3})
    assert dlq.status_code == 200, dlq.text  # dead letters are read by groups: theirs may be set


def test_a_filtered_groups_backlog_over_http(client: httpx.Client, topic: str) -> None:
    """Issue 30.17: the listing counted messages the filter will never let through as the
    group's backlog (/metrics and the console show the same summary)."""
    assert client.put(group_url(topic, "only-a"), json={"filter": "TagA"}).status_code == 200
    batch = [{"body": "x", "tag": tag} for tag in ["TagB", "TagB", "TagA", "TagB"]]
    r = client.post(f"/v1/topics/{topic}/messages/batch", json={"messages": batch})
    assert r.status_code == 200, r.text
    (group,) = client.get(f"/v1/topics/{topic}/groups").json()["items"]
    assert (group["group"], group["backlog"]) == ("only-a", 1)
