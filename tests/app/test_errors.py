"""The one mapping of errors to HTTP: by class hierarchy, never leaking internal text."""

from __future__ import annotations

import orjson
import pytest

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
        c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, RocktimerError)
    ]
    assert len(tree) > 10
    for cls in tree:
        assert any(base in REPLIES for base in cls.__mro__), cls
