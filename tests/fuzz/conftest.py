"""A real rocktimer server per fuzz module, plus the assertions every fuzz test shares.

The server is ``python -m app`` in a child process (tests/support/server.py) on 127.0.0.1, a
random free port and a fresh data dir: exactly what a client sees over real HTTP. Each
module gets its own, so a hostile request that hurts the server cannot fail the other
module's tests, and memory measurements start from a quiet process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import running
from tests.support.server import Server

PROBLEM = "application/problem+json"
PROBLEM_KEYS = frozenset({"type", "title", "status", "detail"})


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(tmp_path_factory.mktemp("fuzz") / "data") as srv:
        yield srv


def problem_errors(status: int, content_type: str | None, doc: Any) -> list[str]:
    """What is wrong with a 4xx/5xx reply as an RFC 9457 problem document (api.md), if anything."""
    wrong: list[str] = []
    if content_type is None or content_type.split(";")[0].strip().lower() != PROBLEM:
        wrong.append(f"content-type is {content_type!r}, not {PROBLEM}")
    if not isinstance(doc, dict):
        return [*wrong, f"body is not a JSON object: {doc!r:.200}"]
    missing = PROBLEM_KEYS - doc.keys()
    if missing:
        wrong.append(f"missing members {sorted(missing)}")
    if doc.get("status") != status:
        wrong.append(f"status member {doc.get('status')!r} is not the HTTP status {status}")
    for key in ("type", "title", "detail"):
        if key in doc and not isinstance(doc[key], str):
            wrong.append(f"{key} is not a string: {doc[key]!r}")
    errors = doc.get("errors")
    if errors is not None and not (
        isinstance(errors, list)
        and all(isinstance(e, dict) and {"loc", "field", "reason"} <= e.keys() for e in errors)
    ):
        wrong.append(f"errors is not a list of {{loc, field, reason}}: {errors!r:.200}")
    return wrong


def assert_problem(r: httpx.Response, status: int | tuple[int, ...]) -> dict[str, Any]:
    """``r`` is a problem+json reply with (one of) ``status``; returns the document."""
    allowed = (status,) if isinstance(status, int) else status
    where = f"{r.request.method} {r.request.url}"
    moved = f" (Location: {r.headers['location']})" if "location" in r.headers else ""
    assert r.status_code in allowed, f"{where}: {r.status_code}{moved} {r.text}"
    try:
        doc: Any = r.json()
    except ValueError:
        doc = r.content[:200]
    wrong = problem_errors(r.status_code, r.headers.get("content-type"), doc)
    assert not wrong, f"{where}: {r.status_code}: {wrong}"
    assert isinstance(doc, dict)
    return doc


def assert_healthy(server: Server) -> None:
    """The server process is alive and ready, on a fresh connection."""
    assert server.proc is not None
    assert server.proc.poll() is None, f"server exited: {server.logs()[-4000:]}"
    r = httpx.get(f"{server.url}/readyz", timeout=10)
    assert r.status_code == 200, r.text
