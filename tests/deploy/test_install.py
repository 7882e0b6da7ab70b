"""The project installs as `make run` / `make test` install it, and says nothing while at it:
pip shows every warning of the build backend (``BuildBackendWarning``), so a deprecated
pyproject.toml entry or a backend note would greet each newcomer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.lock import ROOT

INSTALL_TIMEOUT_S = 600  # an isolated build env fetches the build requirements


@pytest.mark.slow
def test_an_editable_install_prints_no_build_warnings(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    done = subprocess.run(
        [
            sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
            "install", "--quiet", "--no-deps", "-e", str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "BuildBackendWarning" not in output, output
    site = next((venv / "lib").glob("python*/site-packages"))
    assert list(site.glob("__editable__*rocktimer*")), "not installed in editable mode"
