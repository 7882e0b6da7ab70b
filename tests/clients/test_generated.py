"""The committed clients are what ``make clients`` makes from the served /openapi.json.

Each test regenerates from the document a real server serves, into a temp dir, with the
same functions and pinned tools ``make clients`` uses, and compares byte for byte: a route,
schema or declaration changed without ``make clients`` fails here, naming the files.
"""

from __future__ import annotations

import filecmp
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from clients import generate
from tests.support.server import Server

MAKE_CLIENTS = "run `make clients` and commit the result"


@pytest.fixture(scope="module")
def served(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's /openapi.json, written as clients/openapi.json is."""
    reply = httpx.get(f"{server.url}/openapi.json", timeout=10)
    assert reply.status_code == 200, reply.text
    path = tmp_path_factory.mktemp("served") / "openapi.json"
    generate.write_document(reply.json(), path)
    return path


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def drift(committed: Path, fresh: Path) -> list[str]:
    """Files that differ between two trees: missing, extra or changed."""
    old, new = _tree(committed), _tree(fresh)
    changed = [f for f in sorted(old & new) if not filecmp.cmp(committed / f, fresh / f, False)]
    return [
        *(f"missing {f}" for f in sorted(new - old)),
        *(f"stale {f}" for f in sorted(old - new)),
    ] + [f"changed {f}" for f in changed]


def test_committed_document_is_the_served_one(served: Path) -> None:
    committed: Any = json.loads(generate.DOCUMENT.read_text())
    assert committed == json.loads(served.read_text()), f"clients/openapi.json: {MAKE_CLIENTS}"
    assert generate.DOCUMENT.read_text() == served.read_text(), f"formatting: {MAKE_CLIENTS}"


def test_python_client_matches_the_served_document(served: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "python"
    generate.python_client(served, fresh)  # raises on any generator warning
    wrong = drift(generate.PYTHON_CLIENT, fresh)
    assert not wrong, f"clients/python drifted ({MAKE_CLIENTS}): {wrong}"


def test_drift_names_missing_stale_and_changed_files(tmp_path: Path) -> None:
    """The comparison above can fail, and says where."""
    committed, fresh = tmp_path / "committed", tmp_path / "fresh"
    for root, files in (
        (committed, {"same": "x", "edited": "1", "gone": ""}),
        (fresh, {"same": "x", "edited": "2", "new": ""}),
    ):
        root.mkdir()
        for name, text in files.items():
            (root / name).write_text(text)
    assert drift(committed, fresh) == ["missing new", "stale gone", "changed edited"]


@pytest.mark.skipif(
    generate.npm() is None, reason="Node.js/npm is not installed: TypeScript types not checked"
)
def test_typescript_types_match_and_compile(served: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "schema.d.ts"
    generate.typescript_types(served, fresh)
    assert fresh.read_text() == generate.TYPESCRIPT_SCHEMA.read_text(), (
        f"clients/typescript/src/schema.d.ts drifted: {MAKE_CLIENTS}"
    )
    generate.typescript_check()  # tsc --noEmit over the types and src/index.ts


def test_generation_warnings_fail(tmp_path: Path) -> None:
    """The issue's bug, kept out: a schema the generator cannot process is an error, not a
    warning and a silently missing operation."""
    doc: Any = json.loads(generate.DOCUMENT.read_text())
    settings = doc["components"]["schemas"]["GroupSettings"]["properties"]["retry"]
    settings["default"] = {"policy": "levels"}
    broken = tmp_path / "openapi.json"
    generate.write_document(doc, broken)
    with pytest.raises(generate.GenerationFailed, match="GroupSettings"):
        generate.python_client(broken, tmp_path / "python")
