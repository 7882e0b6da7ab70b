"""One real server for the client tests (tests/e2e/server.py), on a fresh data dir."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.server import Server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("clients") / "data") as srv:
        yield srv
