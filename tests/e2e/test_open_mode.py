"""Open mode (no API keys) against web pages, over real HTTP (issue 30 D10; app/origin.py):
a cross-site request may not change anything, a rebound DNS name is not answered, the
console may not be framed. curl, the CLI and the clients pass as before."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import orjson
import pytest

from tests.support.server import Server

FORM = {"content-type": "application/x-www-form-urlencoded"}


def dead_letter(client: httpx.Client, topic: str, group: str, msg_id: str) -> str:
    """``msg_id`` made a dead letter of ``group``; its redrive path."""
    r = client.put(f"/v1/topics/{topic}/groups/{group}", json={"max_attempts": 1})
    assert r.status_code == 200, r.text
    client.post(f"/v1/topics/{topic}/messages", json={"msg_id": msg_id, "body": "x"})
    got = client.post(f"/v1/topics/{topic}/groups/{group}/receive", json={"wait_ms": 5_000}).json()[
        "messages"
    ]
    assert [m["msg_id"] for m in got] == [msg_id]
    nack = {"receipts": [got[0]["receipt"]]}
    assert client.post(f"/v1/topics/{topic}/groups/{group}/nack", json=nack).status_code == 200
    assert state(client, topic, group, msg_id) == "dead"
    return f"/v1/topics/{topic}/groups/{group}/dlq/{msg_id}/redrive"


def state(client: httpx.Client, topic: str, group: str, msg_id: str) -> str:
    r = client.get(f"/v1/topics/{topic}/groups/{group}/messages/{msg_id}")
    assert r.status_code == 200, r.text
    found: str = r.json()["state"]
    return found


def test_a_cross_site_form_post_redrives_nothing(
    client: httpx.Client, server: Server, topic: str
) -> None:
    """A form on another site POSTing to the body-less redrive was answered 200."""
    redrive = dead_letter(client, topic, "billing", "order-1")
    evil = {"origin": "https://evil.example", "sec-fetch-site": "cross-site"}
    for headers, status in [
        ({**FORM, **evil}, 403),  # what a browser sends for the form
        ({"origin": "null", **FORM}, 403),  # a sandboxed frame's or a file's form
        ({"origin": f"http://localhost:{server.port}"}, 403),  # another origin of this host
        ({"sec-fetch-site": "same-site"}, 403),  # a sibling port's page, Origin stripped
        (FORM, 415),  # a form body, whoever sent it: bodies are JSON
        ({"content-type": "text/plain"}, 415),
    ]:
        r = client.post(redrive, headers=headers)
        assert r.status_code == status, (headers, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert state(client, topic, "billing", "order-1") == "dead", headers
    assert "another site" in client.post(redrive, headers={**FORM, **evil}).json()["detail"]
    # The console (same origin), curl (no Origin, no Content-Type), JSON clients: served.
    same = {"origin": server.url, "sec-fetch-site": "same-origin"}
    assert client.post(redrive, headers=same).status_code == 200
    assert state(client, topic, "billing", "order-1") == "pending"
    redrive = dead_letter(client, f"{topic}-2", "ops", "order-2")
    assert client.post(redrive).status_code == 200  # curl -X POST
    redrive = dead_letter(client, f"{topic}-3", "audit", "order-3")
    r = client.post(redrive, headers={"content-type": "application/json"})
    assert r.status_code == 200


def test_cross_site_changes_are_refused_on_every_method(
    client: httpx.Client, server: Server, topic: str
) -> None:
    evil = {"origin": "https://evil.example"}
    body = orjson.dumps({"msg_id": "m", "body": "x", "delay_ms": 60_000})
    json_type = {"content-type": "application/json"}
    sent = client.post(f"/v1/topics/{topic}/messages", content=body, headers={**evil, **json_type})
    assert sent.status_code == 403
    assert client.get(f"/v1/topics/{topic}/messages/m").status_code == 404  # not stored
    assert client.post(f"/v1/topics/{topic}/messages", content=body, headers=json_type).is_success
    cancel = client.delete(f"/v1/topics/{topic}/messages/m", headers=evil)
    assert cancel.status_code == 403
    assert client.get(f"/v1/topics/{topic}/messages/m").json()["state"] == "scheduled"
    settings = client.put(f"/v1/topics/{topic}/groups/g", json={"max_attempts": 2}, headers=evil)
    assert settings.status_code == 403
    assert client.get(f"/v1/topics/{topic}/groups/g").json()["max_attempts"] == 16
    # Reads are not refused for their Origin (a page cannot read the reply without CORS).
    assert client.get(f"/v1/topics/{topic}/messages/m", headers=evil).status_code == 200


@pytest.mark.parametrize(
    ("host", "served"),
    [
        ("evil.example:{port}", False),  # a rebound name
        ("evil.example", False),
        ("127.0.0.1.evil.example:{port}", False),
        ("localhost.evil.example:{port}", False),
        ("127.0.0.1:{port}", True),
        ("localhost:{port}", True),
        ("LOCALHOST", True),
        ("localhost.:{port}", True),  # the root's trailing dot
        ("app.localhost:{port}", True),  # RFC 6761: names under localhost are loopback
        ("[::1]:{port}", True),
        ("10.1.2.3:{port}", True),  # an address cannot be rebound (a published port)
    ],
)
def test_a_host_that_is_not_a_name_of_the_service_is_not_answered(
    client: httpx.Client, server: Server, host: str, served: bool
) -> None:
    """DNS rebinding: a page whose name now resolves to 127.0.0.1 is same-origin for the
    browser, so Origin says nothing; its Host names it."""
    r = client.get("/v1/topics", headers={"host": host.format(port=server.port)})
    if served:
        assert r.status_code == 200, r.text
        return
    assert r.status_code == 421, r.text
    assert "ROCKTIMER_SERVED_HOSTS" in r.json()["detail"]
    rebound = {"host": host.format(port=server.port), "origin": f"http://{host}"}
    assert (
        client.post("/v1/topics/t/messages", json={"body": "x"}, headers=rebound).status_code == 421
    )


def test_served_hosts_name_more_and_api_keys_turn_the_guard_off(
    fresh_server: Callable[..., Server],
) -> None:
    named = fresh_server(ROCKTIMER_SERVED_HOSTS="rocktimer, queue.internal")
    with httpx.Client(base_url=named.url) as c:
        assert c.get("/v1/topics", headers={"host": "rocktimer:8080"}).status_code == 200
        assert c.get("/v1/topics", headers={"host": "queue.internal"}).status_code == 200
        assert c.get("/v1/topics", headers={"host": "evil.example"}).status_code == 421
    named.terminate()
    keyed = fresh_server(ROCKTIMER_API_KEYS='{"k": "admin"}')
    with httpx.Client(base_url=keyed.url, headers={"authorization": "Bearer k"}) as c:
        r = c.get("/v1/topics", headers={"host": "behind.a.proxy.example"})
        assert r.status_code == 200  # with keys a page has none to send: names are free
        r = c.get("/v1/topics", headers={"host": "evil.example", "authorization": ""})
        assert r.status_code == 401


def test_the_console_may_not_be_framed_or_load_from_elsewhere(client: httpx.Client) -> None:
    r = client.get("/ui")
    assert r.status_code == 200
    csp = {
        d.strip().split(" ", 1)[0]: d.strip()
        for d in r.headers["content-security-policy"].split(";")
    }
    assert csp["frame-ancestors"] == "frame-ancestors 'none'"
    assert csp["default-src"] == "default-src 'self'"
    assert r.headers["x-frame-options"] == "DENY"


def test_the_api_explorer_may_not_be_framed(client: httpx.Client) -> None:
    r = client.get("/docs")
    assert r.status_code == 200
    assert r.headers["content-security-policy"] == "frame-ancestors 'none'"
    assert r.headers["x-frame-options"] == "DENY"
