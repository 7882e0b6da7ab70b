"""``make compose-smoke`` on a machine that lacks something: one line saying what and how.

The engine is stood in for by a tiny ``docker`` script on PATH that answers like the real
CLI does in each situation (the real smoke run needs an engine: ``make compose-smoke``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NO_ENGINE = (
    'echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.'
    ' Is the docker daemon running?" >&2; exit 1'
)
# An engine and compose v2, but no image anywhere and no Docker Hub.
NO_IMAGES = """case "$1 $2" in
  "info "*|"compose version") exit 0;;
  "pull "*) echo "dial tcp: lookup registry-1.docker.io: no such host" >&2; exit 1;;
  *) echo "Error: No such image" >&2; exit 1;;
esac"""


def smoke(
    path: Path, docker_script: str | None, base: str = ""
) -> subprocess.CompletedProcess[str]:
    if docker_script is not None:
        docker = path / "docker"
        docker.write_text(f"#!/bin/sh\n{docker_script}\n")
        docker.chmod(0o755)
    return subprocess.run(
        [sys.executable, "-m", "tools.compose_smoke"],
        cwd=ROOT,
        env={"PATH": str(path), "ROCKTIMER_BASE_IMAGE": base},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("script", "base", "says"),
    [
        (None, "", "no docker CLI: install Docker Engine (Debian: apt-get install -y docker.io"),
        (
            NO_ENGINE,
            "",
            "the Docker engine is not running: start it (`sudo systemctl start docker`",
        ),
        (
            NO_IMAGES,
            "",
            "no base image: python:3.11-slim is not here and cannot be pulled (no Docker Hub?):"
            " build a local one with `sudo tools/make-base-image`",
        ),
        (NO_IMAGES, "mine:1", "no base image: mine:1 is not here and cannot be pulled"),
    ],
)
def test_what_is_missing_is_one_line_with_how_to_get_it(
    tmp_path: Path, script: str | None, base: str, says: str
) -> None:
    done = smoke(tmp_path, script, base)
    assert done.returncode == 2
    assert done.stderr == ""
    assert done.stdout.count("\n") == 1
    assert done.stdout.startswith(f"compose-smoke: missing: {says}")


def test_the_base_image_script_it_names_is_there() -> None:
    assert (ROOT / "tools" / "make-base-image").stat().st_mode & 0o111


@pytest.mark.parametrize(
    "segment",
    ["events/date=2026-11-27/part-1-9.parquet", "p1/events/date=2026-11-27/part-1-9.parquet"],
)
def test_the_smoke_finds_sealed_segments_of_one_worker_or_several(
    tmp_path: Path, segment: str
) -> None:
    """The container starts one worker per CPU: its segments are under p<k>/events/ then."""
    from tools.compose_smoke import find_segments

    data = tmp_path / "data"
    (data / segment).parent.mkdir(parents=True)
    (data / segment).parent.joinpath(".part-10-19.parquet").write_bytes(b"half written")
    hidden = subprocess.run(find_segments(str(data)), capture_output=True, text=True, check=True)
    assert hidden.stdout == ""
    (data / segment).write_bytes(b"PAR1")

    found = subprocess.run(find_segments(str(data)), capture_output=True, text=True, check=True)

    assert found.stdout.split() == [str(data / segment)]
