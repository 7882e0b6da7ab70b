"""The repository's own docs: every link in README.md and docs/ leads to a file of the
repository (a clone must hold its contract and its design), and README's settings table
is the Settings of app/config.py."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import annotated_types
import pytest

from app.config import Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_link_stays_inside_the_repository(doc: Path) -> None:
    text = doc.read_text()
    assert "shared/design" not in text
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://")):
            continue
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(ROOT), f"{doc.name}: {target} leaves the repository"
        assert path.exists(), f"{doc.name}: {target} does not exist"


def test_the_readme_links_the_design_and_the_contract() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "(docs/architecture.md)" in readme
    assert "(docs/api.md)" in readme


SETTING_ROW = re.compile(r"^\| `ROCKTIMER_(\w+)` \| (.*?) \| (.*?) \| (.*?) \|$")


def _readme_settings() -> dict[str, tuple[str, str, str]]:
    """README's settings table: each variable's default, bounds and meaning cells."""
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        if match := SETTING_ROW.match(line):
            rows[match[1].lower()] = (match[2], match[3], match[4])
    return rows


def _shown(value: object) -> str:
    """A default as the table writes it."""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value in ({}, None, ""):
        return "*(none)*"
    return f"`{value}`"


def _bounds(field: Any) -> str:
    ge = [m.ge for m in field.metadata if isinstance(m, annotated_types.Ge)]
    le = [m.le for m in field.metadata if isinstance(m, annotated_types.Le)]
    if ge and le:
        return f"{ge[0]} … {le[0]}"
    return f"≥ {ge[0]}" if ge else "—"


def test_the_readme_settings_table_is_the_settings() -> None:
    """Every Setting has one row, with its default and bounds, and no row names a
    setting that is not there; a closed set of values is listed in full."""
    rows = _readme_settings()
    fields = Settings.model_fields
    assert sorted(rows) == sorted(fields)
    for name, field in fields.items():
        default, bounds, meaning = rows[name]
        assert default == _shown(field.get_default(call_default_factory=True)), name
        assert bounds == _bounds(field), name
        if typing.get_origin(field.annotation) is typing.Literal:
            for value in typing.get_args(field.annotation):
                assert f"`{value}`" in default + meaning, (name, value)
