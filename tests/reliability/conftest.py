"""The reliability tests' power-cut file system (tools/powercut), where they cut the power;
their server processes are the root conftest's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.powercut.mount import PowerCut, unavailable

__all__ = ["power_cut", "powercut_fs", "require_fuse"]


def require_fuse() -> None:
    """Skip (under CI=true: fail) when no FUSE file system can be mounted here."""
    reason = unavailable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the power-loss tests need FUSE, and CI must run them: {reason}")
    pytest.skip(f"the power-loss tests need FUSE: {reason}")


@pytest.fixture(name="fs")
def powercut_fs(tmp_path: Path) -> Iterator[PowerCut]:
    """A power-cut file system mounted at ``fs.mount_point`` (empty)."""
    require_fuse()
    pc = PowerCut(tmp_path / "state", tmp_path / "mnt", tmp_path / "fs.log")
    pc.mount()
    yield pc
    pc.unmount()


def power_cut(fs: PowerCut, torn: bool = False, seed: int = 0) -> int:
    """Cut the power (nothing on the mount may run meanwhile) and mount what survived."""
    fs.freeze()
    n = fs.cut(torn, seed)
    fs.mount()
    return n
