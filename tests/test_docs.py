"""The repository's own docs: every link in README.md and docs/ leads to a file of the
repository (a clone must hold its contract and its design)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
