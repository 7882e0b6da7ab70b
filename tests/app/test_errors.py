"""The one mapping of errors to HTTP: by class hierarchy, never leaking internal text."""

from __future__ import annotations

import ast
from pathlib import Path

import orjson
import pytest

from app import errors as app_errors
from app.errors import REPLIES, render, status_of
from storage import errors
from storage.errors import (
    CorruptRecordError,
    DiskFullError,
    MessageConflict,
    ReceiptRejected,
    RocktimerError,
    StorageError,
)

SECRET_TEXT = "rocksdb: IO error: /srv/data/000123.sst: Input/output error"


def doc(exc: Exception) -> tuple[int, dict[str, object], dict[str, str]]:
    response = render(exc)
    return response.status_code, orjson.loads(bytes(response.body)), dict(response.headers)


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (StorageError(SECRET_TEXT), 503),
        (CorruptRecordError(SECRET_TEXT), 500),
        (RocktimerError(SECRET_TEXT), 500),
        (ValueError(SECRET_TEXT), 500),
    ],
)
def test_internal_text_never_reaches_a_client(exc: Exception, status: int) -> None:
    code, body, headers = doc(exc)
    assert code == status
    assert SECRET_TEXT not in orjson.dumps(body).decode()
    assert ("retry-after" in headers) == (status == 503)


def test_a_subclass_gets_its_nearest_ancestors_reply_wherever_it_is_listed() -> None:
    class Later(DiskFullError):
        pass

    class Stale(ReceiptRejected):
        pass

    assert status_of(Later("full")) == (503, "Service Unavailable")
    assert doc(Later("the disk is nearly full"))[1]["detail"] == "the disk is nearly full"
    assert status_of(Stale("expired"))[0] == 409
    assert status_of(MessageConflict("x"))[0] == 409


def test_every_error_class_of_the_tree_has_a_reply() -> None:
    tree = [
        c
        for module in (errors, app_errors)
        for c in vars(module).values()
        if isinstance(c, type) and issubclass(c, RocktimerError)
    ]
    assert len(tree) > 15
    for cls in tree:
        assert any(base in REPLIES for base in cls.__mro__), cls


def test_http_only_errors_live_in_the_http_layer() -> None:
    """storage/errors.py holds what storage and the workers raise; a request's own errors
    (a bad field, a key, a size) are app/errors.py's."""
    for name in ("InvalidInput", "MalformedJson", "Unauthorized", "Forbidden", "PayloadTooLarge"):
        assert not hasattr(errors, name), name
        assert issubclass(getattr(app_errors, name), RocktimerError), name


def _hand_built_replies(path: Path) -> list[str]:
    """Where ``path`` builds a problem reply itself: a call of ``problem`` or the problem
    media type spelled out."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name == "problem":
                found.append(f"{path.name}:{node.lineno} problem(...)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            if '"status":' in text or "problem+json" in text.split("``")[0]:
                found.append(f"{path.name}:{node.lineno} {text[:40]!r}")
    return found


def test_every_error_reply_goes_through_the_one_table() -> None:
    """Auth, limits, the raw HTTP layer and the routes raise the tree's errors; only
    app/errors.py turns them into replies."""
    app_dir = Path(app_errors.__file__).parent
    modules = [p for p in sorted(app_dir.rglob("*.py")) if p != Path(app_errors.__file__)]
    assert len(modules) > 20
    assert [hit for path in modules for hit in _hand_built_replies(path)] == []


@pytest.mark.parametrize(
    ("exc", "status", "header"),
    [
        (app_errors.Unauthorized("unknown API key"), 401, ("www-authenticate", "Bearer")),
        (app_errors.Forbidden("role 'consumer'"), 403, None),
        (app_errors.DeclaredTooLarge("over"), 413, ("connection", "close")),
        (app_errors.PayloadTooLarge("over"), 413, None),
        (app_errors.HeadersTooLarge("over"), 431, ("connection", "close")),
        (app_errors.NotReady("a worker is not running"), 503, None),
    ],
)
def test_the_http_branch_replies_with_its_status_and_headers(
    exc: RocktimerError, status: int, header: tuple[str, str] | None
) -> None:
    code, body, headers = doc(exc)
    assert (code, body["detail"]) == (status, str(exc))
    extra = {k: v for k, v in headers.items() if k not in ("content-length", "content-type")}
    assert extra == (dict([header]) if header else {})
