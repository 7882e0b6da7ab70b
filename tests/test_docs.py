"""The repository's own docs: every link in README.md, bench/README.md and docs/ leads to
a file of the repository (a clone must hold its contract and its design), README's settings
table is the Settings of app/config.py, and the repository describes the product as it is,
not the history of its making."""

from __future__ import annotations

import re
import subprocess
import typing
from pathlib import Path
from typing import Any

import annotated_types
import pytest

from app.config import Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
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


# The repository speaks of the product: its history (the work sessions that shaped it, the
# commits that changed it, the bench figures that measured it) belongs in git log.
SESSION = re.compile(rb"[Ss]ession [0-9]+")
FIGURE = re.compile(rb"[Ff]igures? [0-9]+")
PRODUCT = ("app/", "storage/", "workers/", "pipeline/", "cli/")
# A git hash: 7-40 hex digits with a letter and a digit among them, or digits only where
# a commit is named (after "commit", "at", "beside" …, in parentheses, before "..").
HEX_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
DIGIT_HASH = re.compile(
    r"(?:\b(?:commits?|at|beside|since|before|after|of|build)\s+|\()[0-9]{7,12}\b"
    r"|\b[0-9]{7,12}\.\."
)


def _tracked() -> list[str]:
    """The repository's files, as git knows them (a fresh clone's), or by a walk."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30
        ).stdout
        return [name for name in out.decode().split("\0") if name]
    except (OSError, subprocess.SubprocessError):
        skip = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}
        return [
            p.relative_to(ROOT).as_posix()
            for p in ROOT.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(ROOT).parts)
        ]


def _hits(pattern: re.Pattern[bytes], names: list[str]) -> list[str]:
    found = []
    for name in names:
        path = ROOT / name
        if not path.is_file():  # deleted in the work tree, not yet committed
            continue
        for number, line in enumerate(path.read_bytes().splitlines(), 1):
            if pattern.search(line):
                found.append(f"{name}:{number}: {line.decode(errors='replace').strip()}")
    return found


def test_no_file_names_a_work_session() -> None:
    assert _hits(SESSION, _tracked()) == []


def test_product_code_cites_no_bench_figure() -> None:
    product = [name for name in _tracked() if name.startswith(PRODUCT)]
    assert product, "the product's packages are where they were"
    assert _hits(FIGURE, product) == []


@pytest.mark.parametrize("name", ["README.md", "bench/README.md"])
def test_the_readmes_name_no_commit(name: str) -> None:
    text = (ROOT / name).read_text()
    hashes = [m.group(0) for m in HEX_HASH.finditer(text)]
    hashes += [m.group(0) for m in DIGIT_HASH.finditer(text)]
    assert hashes == []


def test_the_history_checks_can_fail() -> None:
    """The patterns above match what they are meant to catch."""
    assert SESSION.search(b"as measured in " + b"ses" + b"sion 21")
    assert FIGURE.search(b"(bench " + b"figure 10)")
    assert HEX_HASH.search("beside " + "e0cafba" + ", same minutes")
    assert DIGIT_HASH.search("beside " + "1807182" + " in the same minutes")
    assert DIGIT_HASH.search("bisect over " + "1807182" + "..HEAD")
    assert not HEX_HASH.search("delay_ms 3600000, sha256=" + "ab12" * 16)
    assert not DIGIT_HASH.search("BENCH_PIPELINE_N=10000000 python -m bench 16")


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
