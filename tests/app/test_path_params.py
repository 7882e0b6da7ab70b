"""Every path parameter is validated by one declaration (app/deps.py PATH_PARAMS): the
fast path (app/fastpath.py) and the FastAPI routes answer the same bad id alike."""

from __future__ import annotations

import http.client
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

import app.front
from app.deps import path_param
from app.errors import InvalidInput, render

# As sent on the wire: dot segments a URL normaliser would drop, their percent-encoded
# forms (decoded by the server before routing), too long for any id, and non-ASCII.
BAD_IDS = ["..", ".", "%2e", "%2e%2e", "x" * 200, "%C3%A9", "caf%C3%A9"]
# A hot route for each parameter: method, path with {bad} where the bad id goes.
HOT_ROUTES = {
    "topic": ("POST", "/v1/topics/{bad}/messages"),
    "msg_id": ("PATCH", "/v1/topics/t/messages/{bad}"),
    "group": ("POST", "/v1/topics/t/groups/{bad}/receive"),
}


def _ask(url: str, method: str, path: str) -> tuple[int, Any]:
    """One request with ``path`` exactly as given (no client normalises it)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        conn.request(method, path, body=b"{}", headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, orjson.loads(reply.read())
    finally:
        conn.close()


@pytest.mark.parametrize("bad", BAD_IDS)
@pytest.mark.parametrize("name", sorted(HOT_ROUTES))
def test_the_fast_path_and_fastapi_refuse_a_bad_path_parameter_alike(
    live: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, name: str, bad: str
) -> None:
    method, template = HOT_ROUTES[name]
    path = template.format(bad=bad)
    with live() as served:
        fast = _ask(served.url, method, path)
        with monkeypatch.context() as m:
            m.setattr(app.front, "match", lambda *_: None)  # every request to FastAPI
            routed = _ask(served.url, method, path)
    assert fast[0] == routed[0] == 422, (fast, routed)
    assert fast[1]["errors"] == routed[1]["errors"]
    assert fast[1]["errors"][0]["loc"] == ["path", name]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_schedule_id_is_refused_by_the_same_rule_on_either_path(
    live: Callable[..., Any], bad: str
) -> None:
    """Schedules have no fast route: its check (``path_param``) refuses what FastAPI does."""
    with live() as served:
        status, body = _ask(served.url, "PUT", f"/v1/topics/t/schedules/{bad}")
    decoded = bad.replace("%2e", ".").replace("%C3%A9", "é")
    with pytest.raises(InvalidInput) as refused:
        path_param("schedule_id", decoded)
    assert status == render(refused.value).status_code == 422
    assert body["errors"] == refused.value.errors


def test_what_passed_is_remembered_within_a_bound() -> None:
    """A hot route's repeated topic skips the validator; unique ids never grow the memo
    past its bound, and a refused id is never remembered."""
    from app import deps

    for i in range(deps.PASSED_MAX + 10):
        assert path_param("msg_id", f"m-{i}") == f"m-{i}"
    assert len(deps._PASSED["msg_id"]) <= deps.PASSED_MAX
    for _ in range(2):
        with pytest.raises(InvalidInput):
            path_param("msg_id", "..")
    assert ".." not in deps._PASSED["msg_id"]
