"""Lifespan, overload, readiness, metrics, OpenAPI and API keys on a live uvicorn server."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from storage.keys import message_key
from storage.store import CF, RocksStore
from tests.app.conftest import LiveApp
from workers.clock import FakeClock
from workers.txn import Txn

EXPECTED_OPERATIONS = {
    "send_message",
    "send_messages",
    "get_message",
    "cancel_message",
    "receive_messages",
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
        release = threading.Event()

        def block(_: Txn) -> None:
            release.wait(20)

        blocker = threading.Thread(target=lambda: app.engine.writer.call(block, durable=False))
        blocker.start()

        async def burst() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=app.url, timeout=30) as c:
                sends = [
                    c.post("/v1/topics/t/messages", json={"msg_id": f"b{i}", "body": "x"})
                    for i in range(6)
                ]
                first = [asyncio.ensure_future(s) for s in sends]
                # Two fit the queue behind the held writer; the other four are answered.
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
    ):
        assert name in schemas
    send = ops["send_message"]
    assert send["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/SendMessage"
    )
    assert {"201", "200", "409", "422", "429"} <= set(send["responses"])


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
