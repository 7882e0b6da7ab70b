"""The committed JavaScript is what the TypeScript sources compile to (make ui rebuilds it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

UI = Path(__file__).resolve().parents[2] / "app" / "ui"


def test_committed_js_matches_the_typescript_sources(tmp_path: Path) -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not on this machine: the JavaScript cannot be rebuilt")
    tsc = UI / "node_modules" / "typescript" / "bin" / "tsc"
    if not tsc.exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=UI, check=True)
    out = tmp_path / "js"
    subprocess.run(["node", str(tsc), "-p", str(UI), "--outDir", str(out)], check=True)
    built = {p.name: p.read_bytes() for p in out.glob("*.js")}
    committed = {p.name: p.read_bytes() for p in (UI / "static" / "js").glob("*.js")}
    assert built.keys() == committed.keys()
    stale = [name for name in built if built[name] != committed[name]]
    assert not stale, f"run `make ui`: {stale} differ from what app/ui/src compiles to"
