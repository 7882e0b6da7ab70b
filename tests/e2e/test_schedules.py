"""Recurring schedules over real HTTP: put/get/list/delete, bad input, and a SIGKILL at
the instant of a fire (no skip, no double)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import now_ms, receive_all
from tests.support.server import Server


def url(topic: str, sid: str = "") -> str:
    return f"/v1/topics/{topic}/schedules" + (f"/{sid}" if sid else "")


def test_put_get_list_delete(client: httpx.Client, topic: str) -> None:
    body = {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin", "body": "standup"}
    first = client.put(url(topic, "daily"), json=body)
    assert first.status_code == 201, first.text
    view = first.json()
    assert (view["topic"], view["schedule_id"], view["cron"]) == (topic, "daily", body["cron"])
    assert view["next_fire_at_ms"] > now_ms()
    again = client.put(url(topic, "daily"), json={**body, "tag": "T"})
    assert again.status_code == 200
    assert again.json()["created_at_ms"] == view["created_at_ms"]
    for sid in ("a", "b"):
        assert (
            client.put(url(topic, sid), json={"every_ms": 60_000, "body": sid}).status_code == 201
        )
    got = client.get(url(topic, "daily")).json()
    assert (got["tag"], got["last_fire_at_ms"]) == ("T", None)
    page1 = client.get(url(topic), params={"limit": 2}).json()
    assert [s["schedule_id"] for s in page1["items"]] == ["a", "b"]
    page2 = client.get(url(topic), params={"limit": 2, "cursor": page1["next_cursor"]}).json()
    assert [s["schedule_id"] for s in page2["items"]] == ["daily"]
    assert "next_cursor" not in page2
    assert client.delete(url(topic, "a")).status_code == 200
    assert client.get(url(topic, "a")).status_code == 404
    assert client.delete(url(topic, "a")).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"body": "x"}, "every_ms"),
        ({"body": "x", "cron": "* * * * *", "every_ms": 60_000}, "cron"),
        ({"body": "x", "cron": "61 * * * *"}, "minute"),
        ({"body": "x", "cron": "* * * *"}, "cron"),
        ({"body": "x", "cron": "* * * * *", "timezone": "Mars/Base"}, "timezone"),
        ({"body": "x", "every_ms": 999}, "every_ms"),
        ({"body": "x", "every_ms": 60_000, "start_at_ms": 5_000, "end_at_ms": 5_000}, "end_at_ms"),
        ({"body": "x", "every_ms": 60_000, "end_at_ms": 5_000}, "end_at_ms"),
        ({"body": "x", "cron": "0 0 30 2 *"}, "cron"),
        ({"body": "@@", "every_ms": 60_000, "body_encoding": "base64"}, "body"),
        ({"every_ms": 60_000}, "body"),
    ],
)
def test_bad_schedules_are_422(
    client: httpx.Client, topic: str, body: dict[str, Any], field: str
) -> None:
    r = client.put(url(topic, "bad"), json=body)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert field in r.text
    assert client.get(url(topic, "bad")).status_code == 404


def test_bad_schedule_ids_and_topics_are_422(client: httpx.Client, topic: str) -> None:
    body = {"every_ms": 60_000, "body": "x"}
    assert client.put(url(topic, "x" * 101), json=body).status_code == 422
    assert client.put(url(topic, "no%20spaces"), json=body).status_code == 422
    assert client.put(url("%25RETRY%25g", "s"), json=body).status_code == 422


YEAR_2326_MS = 11_256_593_538_460
MAX_DELAY = "maximum delay"


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        # Far off: each was a 201 whose timer key ended the scanner's thread (or a 500).
        ({"every_ms": 1_000, "start_at_ms": YEAR_2326_MS}, "start_at_ms", MAX_DELAY),
        ({"every_ms": 2**53}, "every_ms", MAX_DELAY),
        ({"every_ms": 2**63 - 1}, "every_ms", MAX_DELAY),
        ({"cron": "30 2 * * MON-FRI", "start_at_ms": 576460752303423487}, "start_at_ms", MAX_DELAY),
        ({"cron": "* * * * *", "start_at_ms": 2**63 - 1}, "start_at_ms", MAX_DELAY),
        ({"cron": "* * * * *", "start_at_ms": 253402300800000}, "start_at_ms", MAX_DELAY),
        # Directories of the tz database (500 and a reset connection before).
        ({"cron": "* * * * *", "timezone": "Europe"}, "timezone", "unknown time zone"),
        ({"cron": "* * * * *", "timezone": "America"}, "timezone", "unknown time zone"),
        ({"cron": "* * * * *", "timezone": "Asia"}, "timezone", "unknown time zone"),
        ({"every_ms": 60_000, "timezone": "__pycache__"}, "timezone", "unknown time zone"),
        # Cron text a person would not mean as cron.
        ({"cron": "\u0663 * * * *"}, "cron", "not allowed"),
        ({"cron": "0\u00a00 * * *"}, "cron", "not allowed"),
        ({"cron": "*/99999999999999999999 * * * *"}, "cron", "step"),
    ],
)
def test_far_off_and_malformed_schedules_are_422_naming_the_field(
    client: httpx.Client, topic: str, body: dict[str, Any], field: str, reason: str
) -> None:
    r = client.put(url(topic, "edge"), json={"body": "x", **body})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    errors = r.json()["errors"]
    assert [e["field"] for e in errors] == [field], errors
    assert reason in errors[0]["reason"], errors
    assert client.get(url(topic, "edge")).status_code == 404
    assert client.get("/readyz").status_code == 200


def test_a_schedule_up_to_the_maximum_delay_is_taken(client: httpx.Client, topic: str) -> None:
    nine_years = 9 * 365 * 86_400_000
    for body in (
        {"every_ms": nine_years},
        {"every_ms": 60_000, "start_at_ms": now_ms() + nine_years},
        {"cron": "0 0 * * *", "start_at_ms": now_ms() + nine_years},
    ):
        r = client.put(url(topic, "far"), json={"body": "x", **body})
        assert r.status_code in (200, 201), r.text
    assert client.get("/readyz").status_code == 200


@pytest.mark.parametrize("sid", ["%2e", "%2E", "%2e%2e", ".%2e"])
def test_dot_schedule_ids_are_422_like_msg_ids(client: httpx.Client, topic: str, sid: str) -> None:
    """'.' and '..' match the id pattern, but no URL can name them (a client normalises
    them away): refused on every schedule route, as msg_ids are."""
    for method in ("PUT", "GET", "DELETE"):
        body = {"every_ms": 60_000, "body": "x"} if method == "PUT" else None
        r = client.request(method, url(topic, sid), json=body)
        assert r.status_code == 422, (method, r.text)
        assert "cannot be addressed in a URL" in r.text
    assert client.get(url(topic)).json()["items"] == []


EVERY_MS = 1_000


def test_sigkill_at_the_instant_of_a_fire(
    fresh_server: Callable[..., Server], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    srv = fresh_server(data)
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        body = {"every_ms": EVERY_MS, "body": "tick", "start_at_ms": now_ms() + EVERY_MS}
        assert c.put(url("t", "s"), json=body).status_code == 201
        got = receive_all(c, "t", "g", 3, timeout_s=30)
        assert len(got) >= 3
        fire_at = c.get(url("t", "s")).json()["next_fire_at_ms"]
        time.sleep(max(0.0, (fire_at - now_ms()) / 1000))
    srv.kill()  # at the fire's instant: its batch committed, or not at all
    again = fresh_server(data)
    with httpx.Client(base_url=again.url, timeout=10) as c:
        got += receive_all(c, "t", "g", 3, timeout_s=30)
        last = c.get(url("t", "s")).json()["last_fire_at_ms"]
        got += receive_all(c, "t", "g", 1_000, timeout_s=1)
    ids = [m["msg_id"] for m in got]
    assert len(ids) == len(set(ids)), "no fire delivered twice"
    fires = sorted(int(i.split(":")[1]) for i in ids)
    assert all(m["properties"]["schedule_id"] == "s" for m in got)
    assert all(int(m["msg_id"].split(":")[1]) == m["deliver_at_ms"] for m in got)
    assert fires[-1] >= last
    gaps = [(a, b) for a, b in itertools.pairwise(fires) if b - a != EVERY_MS]
    # Fires go on every second, except across the downtime: there, only the latest missed
    # one was delivered, at once (so within a period of its time), then on again.
    assert len(gaps) <= 1, gaps
    for _, after in gaps:
        caught_up = next(m for m in got if m["deliver_at_ms"] == after)
        assert caught_up["delivered_at_ms"] - after < EVERY_MS
    assert fires[0] == body["start_at_ms"]
