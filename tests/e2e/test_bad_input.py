"""Bad input gets a 4xx problem+json naming the field and the reason, and stores nothing."""

from __future__ import annotations

import httpx
import pytest

PROBLEM = "application/problem+json"


def assert_problem(r: httpx.Response, status: int, field: str | None = None) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    doc = r.json()
    assert {"type", "title", "status", "detail"} <= doc.keys()
    assert doc["status"] == status
    if field is not None:
        assert field in doc["detail"], doc
        assert any(field in e["field"] for e in doc["errors"]), doc


SEND_CASES: list[tuple[str, bytes, int, str | None]] = [
    ("malformed", b'{"body": "x"', 400, None),
    ("not json", b"hello", 400, None),
    ("empty", b"", 400, None),
    ("nan", b'{"body": "x", "delay_ms": NaN}', 422, "delay_ms"),
    ("infinity", b'{"body": "x", "delay_ms": Infinity}', 422, "delay_ms"),
    ("array", b'[{"body": "x"}]', 422, None),
    ("missing body", b'{"msg_id": "a"}', 422, "body"),
    ("body not string", b'{"body": 5}', 422, "body"),
    ("unknown field", b'{"body": "x", "colour": "red"}', 422, "colour"),
    ("bad msg_id", b'{"body": "x", "msg_id": "has space"}', 422, "msg_id"),
    ("long msg_id", b'{"body": "x", "msg_id": "' + b"a" * 129 + b'"}', 422, "msg_id"),
    ("two times", b'{"body": "x", "delay_ms": 5, "deliver_at_ms": 5}', 422, "delay_ms"),
    (
        "three times",
        b'{"body": "x", "delay_ms": 5, "delay_level": 1, "deliver_at_ms": 5}',
        422,
        None,
    ),
    ("negative delay", b'{"body": "x", "delay_ms": -1}', 422, "delay_ms"),
    ("negative deliver_at", b'{"body": "x", "deliver_at_ms": -5}', 422, "deliver_at_ms"),
    ("u64 overflow", b'{"body": "x", "deliver_at_ms": 18446744073709551616}', 422, "deliver_at_ms"),
    ("huge int", b'{"body": "x", "delay_ms": ' + b"9" * 400 + b"}", 422, "delay_ms"),
    ("float time", b'{"body": "x", "delay_ms": 1.5}', 422, "delay_ms"),
    ("string time", b'{"body": "x", "delay_ms": "10"}', 422, "delay_ms"),
    ("bool time", b'{"body": "x", "delay_ms": true}', 422, "delay_ms"),
    ("delay level 0", b'{"body": "x", "delay_level": 0}', 422, "delay_level"),
    ("delay level 19", b'{"body": "x", "delay_level": 19}', 422, "delay_level"),
    ("bad encoding", b'{"body": "x", "body_encoding": "rot13"}', 422, "body_encoding"),
    ("bad base64", b'{"body": "@@", "body_encoding": "base64"}', 422, "body"),
    ("property not str", b'{"body": "x", "properties": {"a": 1}}', 422, "properties"),
    ("invalid utf-8", b'{"body": "\xff\xfe"}', 400, None),
]


@pytest.mark.parametrize(
    ("case", "raw", "status", "field"), SEND_CASES, ids=[c[0] for c in SEND_CASES]
)
def test_bad_send_is_refused_with_a_problem(
    client: httpx.Client, topic: str, case: str, raw: bytes, status: int, field: str | None
) -> None:
    r = client.post(
        f"/v1/topics/{topic}/messages", content=raw, headers={"content-type": "application/json"}
    )
    assert_problem(r, status, field)
    assert client.post(f"/v1/topics/{topic}/groups/g/receive", json={}).json()["messages"] == []


def test_too_many_properties(client: httpx.Client, topic: str) -> None:
    props = {f"k{i}": "v" for i in range(65)}
    r = client.post(f"/v1/topics/{topic}/messages", json={"body": "x", "properties": props})
    assert_problem(r, 422, "properties")


def test_body_over_limit_is_413(client: httpx.Client, topic: str) -> None:
    r = client.post(f"/v1/topics/{topic}/messages", json={"body": "x" * (4 * 1024 * 1024 + 1)})
    assert_problem(r, 413)


def test_request_over_limit_is_413_before_reading_it(client: httpx.Client, topic: str) -> None:
    r = client.post(f"/v1/topics/{topic}/messages", content=b" " * (5 * 1024 * 1024 + 1))
    assert_problem(r, 413)


def test_chunked_request_over_limit_is_413(client: httpx.Client, topic: str) -> None:
    def chunks() -> object:
        for _ in range(6):
            yield b" " * (1024 * 1024)

    r = client.post(f"/v1/topics/{topic}/messages", content=chunks())  # type: ignore[arg-type]
    assert_problem(r, 413)


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/topics/bad%20topic/messages", "topic"),
        ("/v1/topics/a%00b/messages", "topic"),
        ("/v1/topics/a%2Fb/messages", None),
        ("/v1/topics/" + "t" * 128 + "/messages", "topic"),
    ],
)
def test_bad_topic_in_path(client: httpx.Client, path: str, field: str | None) -> None:
    r = client.post(path, json={"body": "x"})
    assert r.status_code in (404, 422)
    assert r.headers["content-type"] == PROBLEM
    if field is not None:
        assert_problem(r, 422, field)


@pytest.mark.parametrize("reserved", ["%25RETRY%25g", "%25DLQ%25g", "%25INVISIBLE%25g"])
def test_reserved_topics_cannot_be_sent_to(client: httpx.Client, reserved: str) -> None:
    assert_problem(client.post(f"/v1/topics/{reserved}/messages", json={"body": "x"}), 422, "topic")
    batch = client.post(f"/v1/topics/{reserved}/messages/batch", json={"messages": [{"body": "x"}]})
    assert_problem(batch, 422, "topic")


def test_bad_msg_id_in_path(client: httpx.Client, topic: str) -> None:
    assert_problem(client.get(f"/v1/topics/{topic}/messages/bad%20id"), 422, "msg_id")
    assert_problem(client.delete(f"/v1/topics/{topic}/messages/{'x' * 129}"), 422, "msg_id")


@pytest.mark.parametrize("count", [0, 1001])
def test_batch_size_limits(client: httpx.Client, topic: str, count: int) -> None:
    items = [{"body": "x"} for _ in range(count)]
    r = client.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items})
    assert_problem(r, 422, "messages")
    assert client.post(f"/v1/topics/{topic}/groups/g/receive", json={}).json()["messages"] == []


def test_batch_not_a_list(client: httpx.Client, topic: str) -> None:
    assert_problem(client.post(f"/v1/topics/{topic}/messages/batch", json={"messages": {}}), 422)
    assert_problem(client.post(f"/v1/topics/{topic}/messages/batch", json=[]), 422)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_messages": 0}, "max_messages"),
        ({"max_messages": 1001}, "max_messages"),
        ({"wait_ms": 30_001}, "wait_ms"),
        ({"wait_ms": -1}, "wait_ms"),
        ({"invisible_ms": 999}, "invisible_ms"),
        ({"invisible_ms": 43_200_001}, "invisible_ms"),
        ({"extra": 1}, "extra"),
    ],
)
def test_bad_receive(client: httpx.Client, topic: str, body: dict[str, int], field: str) -> None:
    assert_problem(client.post(f"/v1/topics/{topic}/groups/g/receive", json=body), 422, field)


@pytest.mark.parametrize(
    "body", [{"receipts": []}, {"receipts": ["x"] * 1001}, {"receipts": [1]}, {}]
)
def test_bad_ack(client: httpx.Client, topic: str, body: dict[str, object]) -> None:
    assert_problem(client.post(f"/v1/topics/{topic}/groups/g/ack", json=body), 422, "receipts")


def test_unknown_route_and_method_are_problems(client: httpx.Client) -> None:
    assert_problem(client.get("/v1/nothing"), 404)
    assert_problem(client.put("/v1/topics/t/messages"), 405)
