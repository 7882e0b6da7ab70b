"""The lock files the images install from: every package pinned, with hashes, by uv.

``make lock`` (``python -m tools.lock``) compiles them from pyproject.toml: the build
system's requirements (installed first, so that the project and any sdist build with
``--no-build-isolation`` and nothing unpinned is fetched at build time), the runtime
``dependencies``, and those plus the ``pipeline`` extra for the pipeline image. Existing
pins are kept unless pyproject.toml no longer allows them (``--upgrade`` moves everything
to the newest allowed release).

Each lock starts with a fingerprint of the pyproject.toml entries it was compiled from.
``python -m tools.lock --check`` (and tests/deploy/test_lock.py, in ``make test``) fails
when that fingerprint is stale or a pin falls outside pyproject.toml's specifiers, so a
dependency change cannot reach the images unlocked. The check needs no network.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
FINGERPRINT = "# pyproject-fingerprint: "
PYTHON_VERSION = "3.11"  # the images' Python (pyproject's requires-python is 3.11 only)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


BUILD = "build-system"
RUNTIME = "dependencies"


@dataclass(frozen=True)
class Lock:
    path: Path
    sections: tuple[str, ...]  # BUILD, RUNTIME or the name of an extra

    @property
    def name(self) -> str:
        return str(self.path.relative_to(ROOT))

    @property
    def extras(self) -> tuple[str, ...]:
        return tuple(s for s in self.sections if s not in {BUILD, RUNTIME})


LOCKS = (
    Lock(ROOT / "requirements-build.lock", (BUILD,)),
    Lock(ROOT / "requirements.lock", (RUNTIME,)),
    Lock(ROOT / "requirements-pipeline.lock", (RUNTIME, "pipeline")),
    # The NATS server alone, for the NATS image of the compose profile `cluster`.
    Lock(ROOT / "requirements-nats.lock", ("nats",)),
)


def read_pyproject(path: Path = PYPROJECT) -> dict[str, Any]:
    with path.open("rb") as f:
        return tomllib.load(f)


def section(pyproject: Mapping[str, Any], name: str) -> list[str]:
    if name == BUILD:
        requires: list[str] = pyproject[BUILD]["requires"]
        return requires
    project = pyproject["project"]
    listed: list[str] = project[name] if name == RUNTIME else project["optional-dependencies"][name]
    return listed


def inputs(pyproject: Mapping[str, Any], sections: Sequence[str]) -> list[Requirement]:
    """The requirements a lock pins, as pyproject.toml states them."""
    return [Requirement(line) for name in sections for line in section(pyproject, name)]


def fingerprint(pyproject: Mapping[str, Any], sections: Sequence[str]) -> str:
    canonical = sorted(str(r) for r in inputs(pyproject, sections))
    canonical.append(f"python {PYTHON_VERSION}")
    return hashlib.sha256(json.dumps(canonical).encode()).hexdigest()


def pins(lock_text: str) -> dict[str, list[Version]]:
    """Package name → pinned versions (a universal lock may pin one per marker)."""
    found: dict[str, list[Version]] = {}
    for line in lock_text.splitlines():
        if m := _PIN.match(line):
            found.setdefault(canonicalize_name(m[1]), []).append(Version(m[2]))
    return found


def problems(lock: Lock, pyproject: Mapping[str, Any], lock_text: str | None) -> list[str]:
    """Why ``lock_text`` does not pin what pyproject.toml asks for (empty: in sync)."""
    if lock_text is None:
        return [f"{lock.name} is missing: run `make lock`"]
    found: list[str] = []
    stamp = FINGERPRINT + fingerprint(pyproject, lock.sections)
    if stamp not in lock_text.splitlines():
        found.append(f"{lock.name} is out of date with pyproject.toml: run `make lock`")
    pinned = pins(lock_text)
    for req in inputs(pyproject, lock.sections):
        name = canonicalize_name(req.name)
        if name not in pinned:
            found.append(f"{lock.name} does not pin {req.name} ({req}): run `make lock`")
        found += [
            f"{lock.name} pins {req.name}=={v}, outside {req}: run `make lock`"
            for v in pinned.get(name, [])
            if not req.specifier.contains(v, prereleases=True)
        ]
    return found


def check(pyproject_path: Path = PYPROJECT) -> list[str]:
    pyproject = read_pyproject(pyproject_path)
    found: list[str] = []
    for lock in LOCKS:
        text = lock.path.read_text() if lock.path.exists() else None
        found += problems(lock, pyproject, text)
    return found


def compile_lock(lock: Lock, pyproject: Mapping[str, Any], upgrade: bool) -> None:
    """Run uv on pyproject.toml (the runtime dependencies and extras), or, for a lock without
    the runtime dependencies (the build system, the NATS server), on its sections'
    requirements given on stdin."""
    alone = RUNTIME not in lock.sections
    command = [
        sys.executable, "-m", "uv", "pip", "compile", "-" if alone else "pyproject.toml",
        *(arg for extra in ([] if alone else lock.extras) for arg in ("--extra", extra)),
        "--universal", "--python-version", PYTHON_VERSION, "--generate-hashes",
        "--native-tls",  # the system's CA store: where TLS is re-signed, PyPI still verifies
        "--custom-compile-command", "make lock", "--quiet", "--output-file", lock.name,
        *(["--upgrade"] if upgrade else []),
    ]  # fmt: skip
    listed = "\n".join(line for name in lock.sections for line in section(pyproject, name))
    done = subprocess.run(
        command, cwd=ROOT, input=listed + "\n", text=True, capture_output=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"make lock: uv failed for {lock.name}: {done.stderr.strip()}")
    body = lock.path.read_text()
    lock.path.write_text(f"{FINGERPRINT}{fingerprint(pyproject, lock.sections)}\n{body}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.lock", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="only verify the locks (no network)")
    mode.add_argument("--upgrade", action="store_true", help="move every pin to the newest")
    args = parser.parse_args(argv)
    if args.check:
        found = check()
        for line in found:
            print(line, file=sys.stderr)
        return 1 if found else 0
    try:
        import uv  # noqa: F401  (the tool ``make lock`` runs; in the test extra)
    except ImportError:
        raise SystemExit("make lock: uv is not installed: run `make .venv/.test-stamp`") from None
    pyproject = read_pyproject()
    for lock in LOCKS:
        compile_lock(lock, pyproject, args.upgrade)
        print(f"{lock.name}: {sum(map(len, pins(lock.path.read_text()).values()))} pins")
    return 0


if __name__ == "__main__":
    sys.exit(main())
