"""Push delivery (webhooks) against real local receivers (tests/e2e/receiver.py) and a real
server: acks, failed attempts, timeouts, Retry-After, a dead receiver, isolation between
groups, the settings' rules, and a SIGKILL with POSTs under way."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from storage import keys
from storage.store import CF, Put, RocksStore
from tests.e2e.receiver import Receiver
from tests.support.process import free_port
from tests.support.server import Server
from tests.workers.support import wait_until

Push = Callable[..., dict[str, Any]]
FAST_RETRY = {"policy": "fixed", "interval_ms": 0}  # a failed attempt is retried at once


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


@pytest.fixture
def push(client: httpx.Client, topic: str) -> Iterator[Push]:
    """``push(group, url, **settings)``: make ``group`` of the test's topic a push group;
    every one is set back to pull at the end (the session's server outlives the test)."""
    groups: list[str] = []

    def make(
        group: str, url: str, *, push: dict[str, Any] | None = None, **settings: Any
    ) -> dict[str, Any]:
        body = {"push": {"url": url, "timeout_ms": 1_000, **(push or {})}, **settings}
        r = client.put(f"/v1/topics/{topic}/groups/{group}", json=body)
        assert r.status_code == 200, r.text
        groups.append(group)
        reply: dict[str, Any] = r.json()
        return reply

    yield make
    for group in groups:
        client.put(f"/v1/topics/{topic}/groups/{group}", json={"push": None})


def send(client: httpx.Client, topic: str, n: int, prefix: str = "m") -> list[str]:
    ids = [f"{prefix}{i}" for i in range(n)]
    batch = {"messages": [{"msg_id": i, "body": f"body of {i}"} for i in ids]}
    r = client.post(f"/v1/topics/{topic}/messages/batch", json=batch)
    assert r.status_code == 200, r.text
    assert {item["status"] for item in r.json()["results"]} == {201}
    return ids


def state(client: httpx.Client, topic: str, group: str, msg_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/topics/{topic}/groups/{group}/messages/{msg_id}")
    assert r.status_code == 200, r.text
    view: dict[str, Any] = r.json()
    return view


def test_pushed_messages_arrive_as_receive_items_and_are_acked(
    client: httpx.Client, topic: str, receiver: Receiver, push: Push
) -> None:
    shown = push("hook", receiver.url("/ok"), push={"secret": "s3cret"})
    assert shown["push"] == {
        "url": receiver.url("/ok"),
        "secret": None,  # write-only
        "timeout_ms": 1_000,
        "max_in_flight": 16,
    }
    assert client.get(f"/v1/topics/{topic}/groups/hook").json()["push"]["secret"] is None
    ids = send(client, topic, 20)
    wait_until(lambda: len(receiver.of("/ok")) == 20, what="20 POSTs")
    first = receiver.of("/ok")[0].item
    assert set(first) == {
        "topic", "msg_id", "body", "body_encoding", "properties", "deliver_at_ms",
        "delivered_at_ms", "attempt", "group",
    }  # fmt: skip  # the receive item without its receipt, plus the group
    assert (first["topic"], first["group"], first["attempt"]) == (topic, "hook", 1)
    assert first["body"] == f"body of {first['msg_id']}"
    wait_until(
        lambda: all(state(client, topic, "hook", i)["state"] == "acked" for i in ids),
        what="every message acked",
    )
    assert sorted(h.msg_id for h in receiver.of("/ok")) == sorted(ids)  # each once
    groups = client.get(f"/v1/topics/{topic}/groups").json()["items"]
    assert [(g["group"], g["push"]["url"], g["push"]["secret"]) for g in groups] == [
        ("hook", receiver.url("/ok"), None)
    ]


def test_failed_posts_are_retried_under_the_groups_policy_until_a_2xx(
    client: httpx.Client, topic: str, receiver: Receiver, push: Push
) -> None:
    push("flaky", receiver.url("/fail/3"), retry=FAST_RETRY)
    send(client, topic, 5)
    wait_until(
        lambda: all(state(client, topic, "flaky", f"m{i}")["state"] == "acked" for i in range(5))
    )
    attempts = Counter(h.msg_id for h in receiver.of("/fail/3"))
    assert attempts == {f"m{i}": 4 for i in range(5)}  # 3 failures, then the 2xx
    assert sorted(h.attempt for h in receiver.of("/fail/3") if h.msg_id == "m0") == [1, 2, 3, 4]
    assert state(client, topic, "flaky", "m0")["attempts"] == 4


def test_a_hanging_receiver_times_out_each_attempt_then_the_message_is_dead(
    client: httpx.Client, topic: str, receiver: Receiver, push: Push
) -> None:
    push("stuck", receiver.url("/hang"), max_attempts=2, retry=FAST_RETRY)
    send(client, topic, 1)
    wait_until(
        lambda: state(client, topic, "stuck", "m0")["state"] == "dead", timeout=20, what="DLQ"
    )
    assert [h.attempt for h in receiver.of("/hang")] == [1, 2]
    dlq = client.get(f"/v1/topics/{topic}/groups/stuck/dlq").json()["items"]
    assert [(d["msg_id"], d["attempts"]) for d in dlq] == [("m0", 2)]


def test_a_receiver_that_is_down_sends_the_message_to_the_dlq(
    client: httpx.Client, topic: str, push: Push
) -> None:
    closed_port = free_port()  # nobody listens there: refused
    push("down", f"http://127.0.0.1:{closed_port}/hook", max_attempts=3, retry=FAST_RETRY)
    send(client, topic, 2)
    wait_until(
        lambda: all(state(client, topic, "down", f"m{i}")["state"] == "dead" for i in range(2))
    )
    assert state(client, topic, "down", "m0")["attempts"] == 3


def test_retry_after_on_a_429_is_the_delay_of_the_next_attempt(
    client: httpx.Client, topic: str, receiver: Receiver, push: Push
) -> None:
    # The group's own policy would retry at once: the receiver's Retry-After wins.
    push("busy", receiver.url("/busy/30"), retry=FAST_RETRY)
    send(client, topic, 1)
    wait_until(lambda: state(client, topic, "busy", "m0")["state"] == "retrying")
    view = state(client, topic, "busy", "m0")
    assert view["next_visible_ms"] - view["last_failure_ms"] == 30_000
    assert [(h.attempt, h.status) for h in receiver.of("/busy/30")] == [(1, 429)]

    push("soon", receiver.url("/busy/1"), retry={"policy": "fixed", "interval_ms": 60_000})
    wait_until(lambda: state(client, topic, "soon", "m0")["state"] == "acked", what="attempt 2")
    hits = receiver.of("/busy/1")
    assert [(h.attempt, h.status) for h in hits] == [(1, 429), (2, 200)]
    assert hits[1].at_ns - hits[0].at_ns >= 1_000_000_000  # not before the second asked for


def test_a_hanging_group_does_not_hold_up_another_on_the_same_topic(
    client: httpx.Client, topic: str, receiver: Receiver, push: Push
) -> None:
    push("slowpoke", receiver.url("/hang"), push={"max_in_flight": 2, "timeout_ms": 60_000})
    push("quick", receiver.url("/ok"))
    ids = send(client, topic, 200)
    wait_until(lambda: len(receiver.of("/ok")) == 200, what="the quick group's 200 POSTs")
    assert sorted(h.msg_id for h in receiver.of("/ok")) == sorted(ids)
    assert len(receiver.of("/hang")) == 2  # all it may have under way, still hanging
    groups = {g["group"]: g for g in client.get(f"/v1/topics/{topic}/groups").json()["items"]}
    assert groups["slowpoke"]["inflight"] == 2


def test_push_settings_are_checked(client: httpx.Client, topic: str, push: Push) -> None:
    url = f"/v1/topics/{topic}/groups/g"
    r = client.put(url, json={"push": {"url": "http://10.0.0.1/hook"}})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "push.url"
    assert "ROCKTIMER_PUSH_ALLOWED_HOSTS" in r.json()["detail"]
    for bad in (
        {"url": "ftp://127.0.0.1/x"},
        {"url": "http://127.0.0.1/x", "timeout_ms": 999},
        {"url": "http://127.0.0.1/x", "max_in_flight": 1_001},
        {"url": "http://user:pw@127.0.0.1/x"},
    ):
        r = client.put(url, json={"push": bad})
        assert r.status_code == 422, (bad, r.text)
        assert r.headers["content-type"] == "application/problem+json"
    push("g", "http://localhost:9/hook")
    r = client.post(f"{url}/receive", json={})
    assert r.status_code == 409, r.text
    assert "push" in r.json()["detail"]
    assert client.put(url, json={"push": None}).status_code == 200
    assert client.post(f"{url}/receive", json={}).status_code == 200  # a pull group again


README_RECEIVER = "webhook receiver"  # the README's example says so in its first line


def readme_receiver() -> str:
    """The README's webhook receiver example, as it is printed there."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = readme.split("```python\n")[1:]
    found = [b.split("```", 1)[0] for b in blocks if README_RECEIVER in b.split("\n", 1)[0]]
    assert len(found) == 1, "the README has one webhook receiver example"
    return found[0]


def test_the_readme_receiver_verifies_signatures(
    client: httpx.Client, topic: str, push: Push, tmp_path: Path
) -> None:
    port = free_port()
    script = tmp_path / "receiver.py"
    script.write_text(readme_receiver())
    out = (tmp_path / "receiver.out").open("wb")
    env = {"WEBHOOK_SECRET": "right", "PORT": str(port), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-u", str(script)], env=env, stdout=out, stderr=out)
    try:
        wait_until(lambda: _listening(port), what="the README receiver")
        url = f"http://127.0.0.1:{port}/hook"
        # One POST at a time each: the example's server takes one connection at a time.
        one = {"max_in_flight": 1, "timeout_ms": 10_000}
        push("right", url, push={"secret": "right", **one})
        push("wrong", url, push={"secret": "wrong", **one}, max_attempts=1)
        push("unsigned", url, push=one, max_attempts=1)
        send(client, topic, 3)
        for group, final in (("right", "acked"), ("wrong", "dead"), ("unsigned", "dead")):

            def settled(g: str = group, f: str = final) -> bool:
                return all(state(client, topic, g, f"m{i}")["state"] == f for i in range(3))

            wait_until(settled, what=f"{group}: {final}")
        # A PUT without a secret keeps the stored one: still signed right.
        push("right", url, push=one, max_attempts=1)
        send(client, topic, 1, prefix="later")
        wait_until(lambda: state(client, topic, "right", "later0")["state"] == "acked")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        out.close()
    printed = (tmp_path / "receiver.out").read_text()
    assert printed.count(f"{topic} m") == 3  # it printed the three it accepted
    assert f"{topic} later0" in printed


def _listening(port: int) -> bool:
    try:
        httpx.post(f"http://127.0.0.1:{port}/", content=b"{}", timeout=1)
    except httpx.TransportError:
        return False
    return True


def test_sigkill_with_posts_under_way_loses_none(
    fresh_server: Callable[..., Server], receiver: Receiver, tmp_path: Path
) -> None:
    server = fresh_server()
    n, in_flight = 60, 8
    with httpx.Client(base_url=server.url, timeout=30) as c:
        settings = {"push": {"url": receiver.url("/slow/100"), "max_in_flight": in_flight,
                             "timeout_ms": 1_000}}  # fmt: skip
        assert c.put("/v1/topics/t/groups/g", json=settings).status_code == 200
        ids = send(c, "t", n)
        wait_until(lambda: len(receiver.of("/slow/100")) >= 20, what="some POSTs")
    server.kill()
    # The boundary between the two processes' POSTs: what the killed one wrote just before
    # it died may be read by the receiver after the kill, so take it once the receiver is quiet.
    restart_ns = receiver.quiet(0.5)
    server.start()
    with httpx.Client(base_url=server.url, timeout=30) as c:
        wait_until(
            lambda: all(state(c, "t", "g", i)["state"] == "acked" for i in ids),
            timeout=30,
            what="every message acked after the restart",
        )
    hits = receiver.of("/slow/100")
    per_id = Counter(h.msg_id for h in hits if h.status == 200)
    assert set(per_id) == set(ids)  # none lost
    twice = {i for i, k in per_id.items() if k > 1}
    # At-least-once: only what was under way at the kill (POSTs, and answered ones whose
    # ack was committing: 2 x max_in_flight at most) is POSTed again, and only once.
    assert len(twice) <= 2 * in_flight
    assert all(per_id[i] == 2 for i in twice)
    first_post = {i: min(h.at_ns for h in hits if h.msg_id == i) for i in twice}
    late = {i: [(h.at_ns - restart_ns) // 1_000_000 for h in hits if h.msg_id == i] for i in twice}
    assert all(at_ns < restart_ns for at_ns in first_post.values()), f"ms after restart: {late}"


def test_push_metrics(client: httpx.Client, topic: str, receiver: Receiver, push: Push) -> None:
    push("counted", receiver.url("/ok"))
    send(client, topic, 3)
    wait_until(lambda: len(receiver.of("/ok")) == 3)
    wait_until(lambda: _metric(client, "rocktimer_pushes_total", topic, "ok") == 3)
    assert _metric(client, "rocktimer_pushes_total", topic, "failed") == 0


def _metric(client: httpx.Client, name: str, topic: str, outcome: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name) and f'topic="{topic}"' in line and f'"{outcome}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return -1.0


def test_api_keys_setting_push_needs_admin(fresh_server: Callable[..., Server]) -> None:
    keys = {"c-key": "consumer", "a-key": "admin"}
    server = fresh_server(ROCKTIMER_API_KEYS=orjson.dumps(keys).decode())
    body = {"push": {"url": "http://127.0.0.1:9/hook", "secret": "x"}}
    with httpx.Client(base_url=server.url) as c:
        as_consumer = {"Authorization": "Bearer c-key"}
        r = c.put("/v1/topics/t/groups/g", json=body, headers=as_consumer)
        assert r.status_code == 403
        r = c.put("/v1/topics/t/groups/g", json=body, headers={"Authorization": "Bearer a-key"})
        assert r.status_code == 200
        shown = c.get("/v1/topics/t/groups/g", headers=as_consumer).json()
        assert shown["push"]["secret"] is None


def test_a_push_url_is_stored_percent_encoded_and_posted_as_such(
    client: httpx.Client, topic: str, receiver: Receiver, push: Push
) -> None:
    """A non-ASCII character or a space in the path reaches the receiver as its UTF-8
    escapes: never a failed request head, never a request line split in two."""
    stored = push("encoded", receiver.url("/ok/漢 x?q=a b"))
    encoded = "/ok/%E6%BC%A2%20x?q=a%20b"
    assert stored["push"]["url"] == receiver.url(encoded)
    r = client.get(f"/v1/topics/{topic}/groups/encoded")
    assert r.json()["push"]["url"] == receiver.url(encoded)
    ids = send(client, topic, 2)
    wait_until(lambda: len(receiver.of(encoded)) == 2)
    assert sorted(h.msg_id for h in receiver.of(encoded)) == ids


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:0/hook", "port 0"),
        ("http://127.0.0.1/a\r\nX-Injected: 1", "control characters"),
        ("http://127.0.0.1/a\tb", "control characters"),
        ("http://127.0.0.1%0d/hook", "not a valid domain name"),
        ("http://[::1%25eth0]/hook", "IPv6"),
    ],
)
def test_a_push_url_no_request_could_carry_is_refused(
    client: httpx.Client, topic: str, url: str, reason: str
) -> None:
    r = client.put(f"/v1/topics/{topic}/groups/g", json={"push": {"url": url}})
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["errors"][0]["field"] == "push.url"
    assert reason in problem["errors"][0]["reason"], problem
    assert client.get(f"/v1/topics/{topic}/groups/g").json()["push"] is None  # not stored


def test_stored_push_settings_that_cannot_be_used_do_not_stop_the_start(
    tmp_path: Path, fresh_server: Callable[..., Server], receiver: Receiver
) -> None:
    """Settings written under looser rules (or damaged) are read as today's rules allow:
    a url is percent-encoded, what cannot be is dropped (that group is not pushed, the log
    says so), and the server starts and pushes for every other group."""
    data = tmp_path / "data"
    fresh_server(data).terminate()  # a store with its column families
    records = {
        "hanzi": orjson.dumps({"push": {"url": receiver.url("/ok/漢"), "timeout_ms": 1_000}}),
        "zero": orjson.dumps({"push": {"url": "http://127.0.0.1:0/ok"}, "max_attempts": 3}),
        "crlf": orjson.dumps({"push": {"url": receiver.url("/ok\r\nX-Injected: 1")}}),
        "junk": b"\xff not json",
        "good": orjson.dumps({"push": {"url": receiver.url("/ok/good"), "timeout_ms": 1_000}}),
    }
    store = RocksStore(data)
    try:
        ops = [Put(CF.META, keys.group_key("t", g), raw) for g, raw in records.items()]
        store.write(ops, sync=True)
    finally:
        store.close()
    server = fresh_server(data)  # raises if it does not start and serve
    with httpx.Client(base_url=server.url, timeout=10) as c:
        ids = send(c, "t", 2)
        wait_until(lambda: len(receiver.of("/ok/good")) == 2)
        wait_until(lambda: len(receiver.of("/ok/%E6%BC%A2")) == 2)
        groups = {g: c.get(f"/v1/topics/t/groups/{g}") for g in records}
        assert {g: r.status_code for g, r in groups.items()} == dict.fromkeys(records, 200)
        assert groups["hanzi"].json()["push"]["url"] == receiver.url("/ok/%E6%BC%A2")
        assert groups["zero"].json()["push"] is None
        assert groups["zero"].json()["max_attempts"] == 3  # its valid fields are kept
        assert groups["crlf"].json()["push"] is None
        got = c.post("/v1/topics/t/groups/zero/receive", json={"max_messages": 10})
        assert sorted(m["msg_id"] for m in got.json()["messages"]) == ids  # a pull group
    assert not [h for h in receiver.hits if "Injected" in h.path]
    log = server.logs()
    for group in ("zero", "crlf", "junk"):
        assert f"group t/{group} are not valid" in log, log


def test_a_push_groups_own_receive_is_not_counted_as_a_long_poll(
    fresh_server: Callable[..., Server], receiver: Receiver
) -> None:
    """Issue 30.17: the rocktimer_long_polls gauge and the console's "long polls waiting"
    counted the service's own webhook receive loops as clients."""
    srv = fresh_server()
    with httpx.Client(base_url=srv.url, timeout=40) as c:
        r = c.put("/v1/topics/pushed/groups/hook", json={"push": {"url": receiver.url("/ok")}})
        assert r.status_code == 200, r.text
        send(c, "pushed", 1)
        wait_until(lambda: len(receiver.of("/ok")) == 1)  # its loop runs, and parks again

        def counts() -> tuple[float, int]:
            gauge = next(
                float(line.rsplit(" ", 1)[1])
                for line in c.get("/metrics").text.splitlines()
                if line.startswith("rocktimer_long_polls ")
            )
            return gauge, c.get("/v1/stats").json()["long_polls"]

        assert counts() == (0, 0)
        poll = subprocess.Popen(  # a client's long poll, from another process
            [
                sys.executable,
                "-c",
                "import httpx, sys; httpx.post(sys.argv[1], json={'wait_ms': 30000}, timeout=60)",
                f"{srv.url}/v1/topics/quiet/groups/g/receive",
            ]
        )
        try:
            wait_until(lambda: counts() != (0, 0))
            assert counts() == (1, 1)
        finally:
            poll.kill()
            poll.wait(30)
