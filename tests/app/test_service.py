"""Lifespan, overload, readiness, metrics, OpenAPI and API keys on a live uvicorn server."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from storage.keys import message_key
from storage.store import CF, RocksStore
from storage.txn import Txn
from tests.app.conftest import LiveApp
from tests.workers.support import wait_until
from workers.clock import FakeClock

EXPECTED_OPERATIONS = {
    "send_message",
    "send_messages",
    "get_message",
    "cancel_message",
    "receive_messages",
    "stream_messages",
    "ack_messages",
    "healthz",
    "readyz",
    "metrics",
    "nack_messages",
    "change_invisibility",
    "get_group_message",
    "get_group_settings",
    "put_group_settings",
    "list_dead_letters",
    "redrive_dead_letter",
    "list_topics",
    "list_groups",
    "list_messages",
    "reschedule_message",
    "put_schedule",
    "get_schedule",
    "list_schedules",
    "delete_schedule",
    "get_stats",
    "get_dead_letter",
    "who_am_i",
    "get_limits",
}


def test_clean_stop_leaves_no_thread_and_loses_no_write(
    live: Callable[..., Any], tmp_path: Any
) -> None:
    before = {t.name for t in threading.enumerate()}
    with live() as app:
        assert isinstance(app, LiveApp)
        with httpx.Client(base_url=app.url) as c:
            for i in range(20):
                r = c.post(
                    "/v1/topics/t/messages",
                    json={"msg_id": f"m{i}", "body": "x", "delay_ms": 60_000},
                )
                assert r.status_code == 201
        workers = {t.name for t in threading.enumerate()} - before
        assert {"rocktimer-writer", "rocktimer-scanner", "rocktimer-deliverer"} <= workers
    left = {t.name for t in threading.enumerate() if t.name.startswith("rocktimer")}
    assert left == set(), f"threads left behind: {left}"
    store = RocksStore(tmp_path / "data")
    try:
        assert all(store.get(CF.MESSAGES, message_key("t", f"m{i}")) for i in range(20))
    finally:
        store.close()


def test_full_writer_queue_answers_429_with_retry_after(live: Callable[..., Any]) -> None:
    with live(writer_queue_size=2) as app:
        release, held = threading.Event(), threading.Event()

        def block(_: Txn) -> None:
            held.set()
            release.wait(20)

        blocker = threading.Thread(target=lambda: app.engine.writer.call(block, durable=False))
        blocker.start()
        # Held before the burst: an idle writer would run the first sends on the loop.
        assert held.wait(10), "the writer never took the blocking op"

        async def burst() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=app.url, timeout=30) as c:
                sends = [
                    c.post("/v1/topics/t/messages", json={"msg_id": f"b{i}", "body": "x"})
                    for i in range(6)
                ]
                first = [asyncio.ensure_future(s) for s in sends]
                # Two fit the queue behind the held writer (whether they came in one turn of
                # the server's loop, one op, or in two); the other four are answered.
                deadline = time.monotonic() + 20
                while app.engine.writer.queue_depth < 2 or sum(f.done() for f in first) < 4:
                    assert time.monotonic() < deadline, "the burst never filled the queue"
                    await asyncio.sleep(0.01)
                release.set()
                return list(await asyncio.gather(*first))

        replies = asyncio.run(burst())
        blocker.join()
        codes = sorted(r.status_code for r in replies)
        assert codes == [201, 201, 429, 429, 429, 429]
        for r in replies:
            if r.status_code == 429:
                assert r.headers["content-type"] == "application/problem+json"
                assert int(r.headers["retry-after"]) >= 1
        with httpx.Client(base_url=app.url) as c:
            accepted = [r.json()["msg_id"] for r in replies if r.status_code == 201]
            for msg_id in accepted:
                assert c.get(f"/v1/topics/t/messages/{msg_id}").json()["state"] == "delivered"
            refused = [f"b{i}" for i in range(6) if f"b{i}" not in accepted]
            for msg_id in refused:
                assert c.get(f"/v1/topics/t/messages/{msg_id}").status_code == 404


def test_readyz_tells_the_truth_when_a_worker_dies(live: Callable[..., Any]) -> None:
    with live() as app, httpx.Client(base_url=app.url) as c:
        assert c.get("/readyz").status_code == 200
        assert c.get("/healthz").status_code == 200
        app.engine.scanner.stop()
        r = c.get("/readyz")
        assert r.status_code == 503
        assert r.headers["content-type"] == "application/problem+json"
        assert c.get("/healthz").status_code == 200


def test_metrics_expose_pending_timers_and_lateness(live: Callable[..., Any]) -> None:
    # On a fake clock that stands still, "now" is delivered exactly at its deliver time.
    with live(clock=FakeClock()) as app, httpx.Client(base_url=app.url) as c:
        c.post("/v1/topics/t/messages", json={"msg_id": "later", "body": "x", "delay_ms": 60_000})
        c.post("/v1/topics/t/messages", json={"msg_id": "now", "body": "x"})
        text = c.get("/metrics").text
        assert "rocktimer_pending_timers 1.0" in text
        assert 'rocktimer_delivery_lateness_seconds_bucket{le="0.001"} 1.0' in text
        assert "rocktimer_delivery_lateness_seconds_count 1.0" in text


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of a Prometheus exposition."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise AssertionError(f"no {name} {labels} in /metrics")


def test_metrics_answer_an_operators_questions(live: Callable[..., Any]) -> None:
    clock = FakeClock()
    with live(clock=clock) as app, httpx.Client(base_url=app.url) as c:
        # A deliver time of 1970 is due at arrival: not 56 years late.
        c.post("/v1/topics/t/messages", json={"body": "x", "deliver_at_ms": 0})
        for i in range(3):
            c.post("/v1/topics/t/messages", json={"msg_id": f"m{i}", "body": "x"})
        c.put("/v1/topics/t/groups/g", json={"max_attempts": 2})
        got = c.post("/v1/topics/t/groups/g/receive", json={"max_messages": 3}).json()
        receipts = [m["receipt"] for m in got["messages"]]
        c.post("/v1/topics/t/groups/g/ack", json={"receipts": receipts[:1]})
        c.post("/v1/topics/t/groups/g/nack", json={"receipts": receipts[1:2], "delay_ms": 60_000})
        clock.advance(30_001)  # the third one's invisibility runs out
        wait_until(lambda: app.engine.tallies["expiries"] == 1, what="the expiry")
        text = c.get("/metrics").text

    assert sample(text, "rocktimer_delivery_lateness_seconds_count") == 4
    assert sample(text, "rocktimer_delivery_lateness_seconds_sum") == 0
    group = {"topic": "t", "group": "g"}
    assert sample(text, "rocktimer_group_backlog", **group) == 2  # 1 never received, 1 back
    assert sample(text, "rocktimer_group_inflight", **group) == 0
    assert sample(text, "rocktimer_group_retrying", **group) == 1
    assert sample(text, "rocktimer_group_dead", **group) == 0
    for event, n in [("acks", 1), ("nacks", 1), ("expiries", 1), ("dead_letters", 0)]:
        assert sample(text, f"rocktimer_{event}_total") == n
    assert sample(text, "rocktimer_redrives_total") == 0
    duration = "rocktimer_request_duration_seconds_count"
    fast = "/v1/topics/{topic}/groups/{group}/receive"  # served by the ASGI fast path
    assert sample(text, duration, route=fast, method="POST") == 1
    put = "/v1/topics/{topic}/groups/{group}"
    assert sample(text, duration, route=put, method="PUT") == 1
    assert sample(text, "rocktimer_wal_fsync_seconds_count") >= 1
    assert sample(text, "rocktimer_writer_batch_ops_count") >= 7
    assert sample(text, "rocktimer_rocksdb_memory_bytes", kind="memtables") > 0  # the writes
    assert sample(text, "rocktimer_rocksdb_memory_bytes", kind="block_cache") >= 0
    assert sample(text, "rocktimer_rocksdb_memory_bytes", kind="table_readers") >= 0


def test_openapi_has_stable_operation_ids_and_named_schemas(live: Callable[..., Any]) -> None:
    with live() as app, httpx.Client(base_url=app.url) as c:
        doc = c.get("/openapi.json").json()
    ops = {op["operationId"]: op for path in doc["paths"].values() for op in path.values()}
    assert set(ops) == EXPECTED_OPERATIONS
    schemas = doc["components"]["schemas"]
    for name in (
        "SendMessage",
        "SendBatch",
        "ReceiveRequest",
        "AckRequest",
        "Problem",
        "SendResult",
        "RescheduleMessage",
        "PutSchedule",
        "ScheduleView",
        "SchedulePage",
    ):
        assert name in schemas
    patch = ops["reschedule_message"]
    assert patch["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/RescheduleMessage"
    )
    send = ops["send_message"]
    assert send["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/SendMessage"
    )
    assert {"201", "200", "409", "422", "429"} <= set(send["responses"])
    stream = ops["stream_messages"]["responses"]
    event = stream["200"]["content"]["text/event-stream"]["schema"]
    assert event["properties"]["data"]["contentSchema"]["$ref"].endswith("/ReceivedMessage")
    assert {"401", "403", "422"} <= set(stream)


def test_api_keys_gate_roles(live: Callable[..., Any]) -> None:
    keys = {"p-key": "producer", "c-key": "consumer", "a-key": "admin"}
    with live(api_keys=keys) as app, httpx.Client(base_url=app.url) as c:
        send = "/v1/topics/t/messages"
        body = {"body": "x"}
        assert c.post(send, json=body).status_code == 401
        assert c.post(send, json=body, headers={"authorization": "Bearer nope"}).status_code == 401
        r = c.post(send, json=body, headers={"authorization": "Bearer c-key"})
        assert r.status_code == 403
        assert r.headers["content-type"] == "application/problem+json"
        assert c.post(send, json=body, headers={"authorization": "Bearer p-key"}).status_code == 201
        assert c.post(send, json=body, headers={"authorization": "Bearer a-key"}).status_code == 201
        recv = "/v1/topics/t/groups/g/receive"
        assert c.post(recv, json={}, headers={"authorization": "Bearer p-key"}).status_code == 403
        got = c.post(recv, json={"max_messages": 10}, headers={"authorization": "Bearer c-key"})
        assert len(got.json()["messages"]) == 2
        assert c.get("/healthz").status_code == 200
        assert c.get("/metrics").status_code == 200


def test_lagging_deliveries_show_in_readyz_and_metrics_and_sends_get_429(
    live: Callable[..., Any],
) -> None:
    clock = FakeClock()
    entered, release = threading.Event(), threading.Event()

    def busy(_: Txn) -> None:  # client work holding the writer while a timer falls due
        entered.set()
        release.wait(20)

    with live(clock, due_backlog_limit_ms=1_000) as app, httpx.Client(base_url=app.url) as c:
        send = {"msg_id": "due", "body": "x", "delay_ms": 100}
        assert c.post("/v1/topics/t/messages", json=send).status_code == 201
        assert c.get("/readyz").json()["status"] == "ready"
        wait_until(lambda: app.engine.scanner.next_due_ms is not None)
        blocker = threading.Thread(target=lambda: app.engine.writer.call(busy, durable=False))
        blocker.start()
        try:
            assert entered.wait(20)
            clock.advance(1_200)
            ready = c.get("/readyz")
            assert ready.status_code == 200
            assert ready.json() == {
                "status": "lagging",
                "pending_timers": 1,
                "writer_queue": 0,
                "due_backlog_timers": 1,
                "due_backlog_oldest_ms": 1_100,
            }
            text = c.get("/metrics").text
            assert "rocktimer_due_backlog_timers 1.0" in text
            assert "rocktimer_due_backlog_oldest_seconds 1.1" in text
            later = {"msg_id": "later", "body": "x", "delay_ms": 60_000}
            for refused in (
                c.post("/v1/topics/t/messages", json=later),
                c.post("/v1/topics/t/messages/batch", json={"messages": [later]}),
            ):
                assert refused.status_code == 429
                assert refused.headers["content-type"] == "application/problem+json"
                assert int(refused.headers["retry-after"]) >= 1
                assert "behind" in refused.json()["detail"]
            assert "rocktimer_sends_refused_lagging_total 2.0" in c.get("/metrics").text
        finally:
            release.set()
            blocker.join(20)
        wait_until(lambda: c.get("/readyz").json()["status"] == "ready")
        assert c.get("/v1/topics/t/messages/due").json()["state"] == "delivered"
        assert c.post("/v1/topics/t/messages", json=later).status_code == 201


def test_metrics_and_topics_cover_a_live_topic_after_a_thousand_dead_ones(
    live: Callable[..., Any],
) -> None:
    """Issue 30.7: with 1,000 topics swept empty by retention, /metrics (the first 1,000
    topics by name) lost the series of a live topic, and GET /v1/topics listed the dead."""
    clock = FakeClock()
    retention = 60_000
    with (
        live(
            clock=clock, retention_ms=retention, sweep_interval_ms=86_400_000
        ) as app,  # a day: the most it may be
        httpx.Client(base_url=app.url, timeout=30) as c,
    ):
        for i in range(1_000):
            assert c.post(f"/v1/topics/dead-{i:04}/messages", json={"body": "x"}).status_code == 201
        clock.advance(retention)
        c.post("/v1/topics/live/messages", json={"msg_id": "m", "body": "x"})
        got = c.post("/v1/topics/live/groups/g/receive", json={"max_messages": 1}).json()
        assert len(got["messages"]) == 1
        app.engine.sweeper.retain()
        app.engine.sweeper.retain()  # the lanes found empty by the first sweep are forgotten
        text = c.get("/metrics").text
        listed = c.get("/v1/topics", params={"limit": 1000}).json()
    assert sample(text, "rocktimer_group_inflight", topic="live", group="g") == 1
    assert [t["topic"] for t in listed["items"]] == ["live"]


def test_a_filtered_groups_backlog_in_metrics(live: Callable[..., Any]) -> None:
    """Issue 30.17: rocktimer_group_backlog counted what the group's filter passes over."""
    with live(clock=FakeClock()) as app, httpx.Client(base_url=app.url) as c:
        assert c.put("/v1/topics/t/groups/g", json={"filter": "TagA"}).status_code == 200
        for tag in ["TagB", "TagA", "TagB", "TagB"]:
            sent = c.post("/v1/topics/t/messages", json={"body": "x", "tag": tag})
            assert sent.status_code == 201
        text = c.get("/metrics").text
    assert sample(text, "rocktimer_group_backlog", topic="t", group="g") == 1


def test_limits_are_the_services_own_settings(live: Callable[..., Any]) -> None:
    """What a client sizes its requests by (the bulk loader) is the service's settings, not
    the client's defaults; no API key needed."""
    with (
        live(
            max_request_bytes=100_000,
            max_body_bytes=2_000,
            max_properties=3,
            max_delay_ms=86_400_000,
            api_keys={"k": "producer"},
        ) as app,
        httpx.Client(base_url=app.url) as c,
    ):
        r = c.get("/v1/limits")
    assert r.status_code == 200
    assert r.json() == {
        "max_request_bytes": 100_000,
        "max_batch": 1000,
        "max_body_bytes": 2_000,
        "max_properties": 3,
        "max_delay_ms": 86_400_000,
        "partitions": 1,
    }
