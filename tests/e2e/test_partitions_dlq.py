"""A group's dead letters (``%DLQ%group``) with two workers: every operation of docs/api.md
on the DLQ topic answers for the dead letters of every partition (app/cluster/dlq.py).
Real processes; each request over a new connection, so it reaches either worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.test_partitions import open_streams, owner_partition, topics_of
from tests.support.server import Server

pytestmark = pytest.mark.slow

DLQ = "/v1/topics/%25DLQ%25g"


def kill(c: httpx.Client, topic: str, msg_id: str) -> None:
    """Send one message and fail its only attempt: a dead letter of group g."""
    assert c.put(f"/v1/topics/{topic}/groups/g", json={"max_attempts": 1}).is_success
    assert c.post(f"/v1/topics/{topic}/messages", json={"msg_id": msg_id, "body": topic}).is_success
    got = c.post(f"/v1/topics/{topic}/groups/g/receive", json={"max_messages": 1}).json()
    receipts = [m["receipt"] for m in got["messages"]]
    nacked = c.post(f"/v1/topics/{topic}/groups/g/nack", json={"receipts": receipts})
    assert nacked.json()["results"][0]["status"] == "nacked", nacked.text


@pytest.fixture
def two(
    cluster: Callable[..., Server], fresh_client: Callable[[Server], httpx.Client]
) -> tuple[Server, httpx.Client, list[str]]:
    """Two workers, two partitions, and two dead letters from topics of each."""
    # A stream says "keep-alive" every 200 ms: a reader looks at its clock that often.
    srv = cluster(workers=2, partitions=2, ROCKTIMER_STREAM_KEEPALIVE_MS="200")
    c = fresh_client(srv)
    sources = topics_of(0, 2, 2, "dl") + topics_of(1, 2, 2, "dl")
    for t in sources:
        kill(c, t, f"dead-{t}")
    return srv, c, sources


def stream_events(
    url: str, path: str, wanted: int, linger_s: float = 0.0, timeout_s: float = 15.0
) -> list[dict[str, Any]]:
    """The stream's messages until ``wanted`` came (and ``linger_s`` more), or its end."""
    got: list[dict[str, Any]] = []
    done_at: float | None = None
    deadline = time.monotonic() + timeout_s
    with (
        httpx.Client(base_url=url, timeout=10) as own,
        own.stream("GET", path) as r,
    ):
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            now = time.monotonic()
            if now >= deadline or (done_at is not None and now >= done_at):
                break
            if line.startswith("data: "):
                got.append(orjson.loads(line[6:]))
                if len(got) == wanted and done_at is None:
                    done_at = time.monotonic() + linger_s
    return got


def test_a_dlq_stream_gathers_every_partitions_dead_letters(
    two: tuple[Server, httpx.Client, list[str]],
) -> None:
    srv, c, sources = two
    got = stream_events(srv.url, f"{DLQ}/groups/sr/stream", len(sources))
    assert sorted(m["source_topic"] for m in got) == sorted(sources)
    assert {m["topic"] for m in got} == {"%DLQ%g"}
    receipts = [m["receipt"] for m in got]
    acked = c.post(f"{DLQ}/groups/sr/ack", json={"receipts": receipts}).json()["results"]
    assert [r["status"] for r in acked] == ["acked"] * len(sources)
    # A dead letter made while a stream is open reaches it, from either partition.
    late = [sources[0], sources[-1]]
    assert {owner_partition(t, 2) for t in late} == {0, 1}

    def die_late() -> None:
        for t in late:
            kill(c, t, f"late-{t}")

    timer = threading.Timer(1.0, die_late)
    timer.start()
    try:
        got = stream_events(srv.url, f"{DLQ}/groups/sr/stream", 2)
    finally:
        timer.join()
    assert sorted(m["msg_id"] for m in got) == sorted(f"late-{t}" for t in late)


def test_a_dlq_streams_max_in_flight_is_shared_by_the_partitions(
    two: tuple[Server, httpx.Client, list[str]],
) -> None:
    srv, _, _ = two
    got = stream_events(srv.url, f"{DLQ}/groups/sf/stream?max_in_flight=2", 2, linger_s=1.5)
    assert len(got) == 2, got  # not two from each partition
    assert {owner_partition(m["source_topic"], 2) for m in got} == {0, 1}


def test_a_dlq_stream_refuses_as_one_stream_and_ends_every_part_when_the_client_goes(
    two: tuple[Server, httpx.Client, list[str]],
) -> None:
    srv, c, _ = two
    for query in ("max_in_flight=0", "invisible_ms=5", "max_in_flight=x"):
        r = c.get(f"{DLQ}/groups/sr/stream?{query}")
        assert r.status_code == 422, r.text
        assert r.headers["content-type"] == "application/problem+json"
    assert c.head(f"{DLQ}/groups/sr/stream").status_code == 200
    for _ in range(3):  # from either worker
        with (
            httpx.Client(base_url=srv.url, timeout=10) as own,
            own.stream("GET", f"{DLQ}/groups/sx/stream?max_in_flight=1") as r,
        ):
            assert r.status_code == 200
            lines = r.iter_lines()  # kept: a dropped iterator closes the connection
            next(lines)  # the stream began
            assert until_open(c, (1, 1)) == (1, 1)  # a stream on each partition
        assert until_open(c, (0, 0)) == (0, 0)  # each one ended with the client's


def until_open(c: httpx.Client, wanted: tuple[int, int]) -> tuple[float, float]:
    """The streams open on partitions 0 and 1, once they are ``wanted`` or after 10 s."""
    deadline = time.monotonic() + 10
    while (got := (open_streams(c, 0), open_streams(c, 1))) != wanted:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return got


def test_every_dlq_operation_answers_for_both_partitions(
    two: tuple[Server, httpx.Client, list[str]],
) -> None:
    _, c, sources = two
    # The topic list and the DLQ topic's groups: one item each, counted over both.
    for _ in range(3):
        listed = c.get("/v1/topics").json()["items"]
        dlq = [i for i in listed if i["topic"] == "%DLQ%g"]
        assert len(dlq) == 1, listed
        assert dlq[0]["delivered"] == len(sources)
        names = [i["topic"] for i in listed]
        assert names == sorted(names)
        paged, cursor = [], None
        while True:
            r = c.get("/v1/topics", params={"limit": 1, **({"cursor": cursor} if cursor else {})})
            paged += [i["topic"] for i in r.json()["items"]]
            if (cursor := r.json().get("next_cursor")) is None:
                break
        assert paged == names
    # Group settings of the DLQ topic: one PUT, the same wherever the dead letters are.
    put = c.put(f"{DLQ}/groups/r", json={"max_attempts": 2})
    assert put.status_code == 200, put.text
    for _ in range(3):
        assert c.get(f"{DLQ}/groups/r").json()["max_attempts"] == 2
    got = c.post(f"{DLQ}/groups/r/receive", json={"max_messages": 100}).json()["messages"]
    assert sorted(m["source_topic"] for m in got) == sorted(sources)
    by_source = {m["source_topic"]: m for m in got}
    for _ in range(3):
        groups = c.get(f"{DLQ}/groups").json()["items"]
        assert [(g["group"], g["inflight"]) for g in groups] == [("r", len(sources))]
    # A dead letter is not a message of the DLQ topic by its msg_id (nor of its readers'
    # per-message state): 404, as with one process, from whichever worker.
    for t in sources:
        msg_id = by_source[t]["msg_id"]
        assert c.get(f"{DLQ}/messages/{msg_id}").status_code == 404
        assert c.get(f"{DLQ}/groups/r/messages/{msg_id}").status_code == 404
    # Invisibility: the partition that holds the receipt answers; an old receipt is 409.
    first = by_source[sources[0]]
    moved = c.post(
        f"{DLQ}/groups/r/invisibility", json={"receipt": first["receipt"], "invisible_ms": 60_000}
    )
    assert moved.status_code == 200, moved.text
    again = c.post(
        f"{DLQ}/groups/r/invisibility", json={"receipt": first["receipt"], "invisible_ms": 60_000}
    )
    assert again.status_code == 409, again.text
    by_source[sources[0]] = {**first, "receipt": moved.json()["receipt"]}
    # Nack one from each partition: with two attempts allowed they come back.
    nack = [by_source[sources[0]]["receipt"], by_source[sources[-1]]["receipt"]]
    nacked = c.post(f"{DLQ}/groups/r/nack", json={"receipts": nack, "delay_ms": 0})
    assert [r["status"] for r in nacked.json()["results"]] == ["nacked", "nacked"]
    back: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while len(back) < 2 and time.monotonic() < deadline:
        back += c.post(f"{DLQ}/groups/r/receive", json={"wait_ms": 1000}).json()["messages"]
    assert sorted(m["source_topic"] for m in back) == sorted([sources[0], sources[-1]])
    assert {m["attempt"] for m in back} == {2}
    rest = [by_source[t]["receipt"] for t in sources[1:-1]] + [m["receipt"] for m in back]
    acked = c.post(f"{DLQ}/groups/r/ack", json={"receipts": rest}).json()["results"]
    assert [r["status"] for r in acked] == ["acked"] * len(rest)
    # Redrive, on the source topic (its partition holds its dead letter).
    for t in (sources[0], sources[-1]):
        listed = c.get(f"/v1/topics/{t}/groups/g/dlq").json()["items"]
        assert [i["msg_id"] for i in listed] == [f"dead-{t}"]
        r = c.post(f"/v1/topics/{t}/groups/g/dlq/dead-{t}/redrive")
        assert r.status_code == 200, r.text
