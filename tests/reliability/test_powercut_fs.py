"""The power-cut file system (tools/powercut) keeps what was fsynced and nothing else.

Each test writes through a real FUSE mount, cuts the power and mounts what survived.
Without /dev/fuse the tests are skipped, saying why; under CI=true they fail instead: the
power-loss loop (tests/reliability/test_powerloss.py) depends on this file system.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from tests.reliability.conftest import power_cut
from tools.powercut.mount import PowerCut


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(path: Path, data: bytes, sync: str = "") -> None:
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        if sync == "fsync":
            os.fsync(f.fileno())
        elif sync == "fdatasync":
            os.fdatasync(f.fileno())


def test_reads_see_unsynced_writes_until_the_cut(fs: PowerCut) -> None:
    m = fs.mount_point
    write(m / "f", b"synced", "fsync")
    fsync_dir(m)
    write(m / "f", b"+cached")
    assert (m / "f").read_bytes() == b"synced+cached"  # the page cache serves it
    power_cut(fs)
    assert (m / "f").read_bytes() == b"synced"


@pytest.mark.parametrize("sync", ["fsync", "fdatasync"])
def test_a_synced_write_survives_an_unsynced_one_does_not(fs: PowerCut, sync: str) -> None:
    m = fs.mount_point
    write(m / "kept", b"a" * 10_000, sync)
    write(m / "lost", b"b" * 10_000)
    fsync_dir(m)  # both names are durable; only one file's bytes are
    power_cut(fs)
    assert (m / "kept").read_bytes() == b"a" * 10_000
    assert (m / "lost").read_bytes() == b""


def test_a_file_reopened_write_only_and_written_over_in_place_syncs(fs: PowerCut) -> None:
    """As RocksDB reuses an obsolete WAL file: renamed, opened write-only (no create, no
    truncate), written over from offset 0, fdatasynced; the rest of the old bytes stay."""
    m = fs.mount_point
    write(m / "old.log", b"o" * 8192, "fsync")
    os.rename(m / "old.log", m / "new.log")
    fsync_dir(m)
    fd = os.open(m / "new.log", os.O_WRONLY)
    try:
        os.pwrite(fd, b"n" * 4096, 0)
        os.fdatasync(fd)
        os.pwrite(fd, b"x" * 100, 4096)  # not synced
    finally:
        os.close(fd)
    power_cut(fs)
    assert (m / "new.log").read_bytes() == b"n" * 4096 + b"o" * 4096


def test_a_create_without_a_directory_fsync_is_lost(fs: PowerCut) -> None:
    m = fs.mount_point
    (m / "d").mkdir()
    fsync_dir(m)
    write(m / "d" / "synced-file", b"x", "fsync")  # its bytes, but not its name
    power_cut(fs)
    assert (m / "d").is_dir()
    assert list((m / "d").iterdir()) == []


def test_a_rename_without_a_directory_fsync_is_lost(fs: PowerCut) -> None:
    m = fs.mount_point
    write(m / ".hidden", b"segment", "fsync")
    fsync_dir(m)
    os.replace(m / ".hidden", m / "part")
    assert sorted(os.listdir(m)) == ["part"]
    power_cut(fs)
    assert sorted(os.listdir(m)) == [".hidden"]  # the old name, the synced bytes
    assert (m / ".hidden").read_bytes() == b"segment"
    os.replace(m / ".hidden", m / "part")
    fsync_dir(m)
    power_cut(fs)
    assert sorted(os.listdir(m)) == ["part"]
    assert (m / "part").read_bytes() == b"segment"


def test_an_unlink_without_a_directory_fsync_comes_back(fs: PowerCut) -> None:
    m = fs.mount_point
    write(m / "f", b"kept", "fsync")
    fsync_dir(m)
    (m / "f").unlink()
    power_cut(fs)
    assert (m / "f").read_bytes() == b"kept"
    (m / "f").unlink()
    fsync_dir(m)
    power_cut(fs)
    assert not (m / "f").exists()


def test_a_directory_is_lost_until_its_parent_is_fsynced(fs: PowerCut) -> None:
    m = fs.mount_point
    (m / "a" / "b").mkdir(parents=True)
    write(m / "a" / "b" / "f", b"x", "fsync")
    fsync_dir(m / "a" / "b")
    fsync_dir(m / "a")  # but not m: a itself is not durable, nor anything under it
    power_cut(fs)
    assert list(m.iterdir()) == []
    (m / "a" / "b").mkdir(parents=True)
    write(m / "a" / "b" / "f", b"x", "fsync")
    for d in (m / "a" / "b", m / "a", m):
        fsync_dir(d)
    power_cut(fs)
    assert (m / "a" / "b" / "f").read_bytes() == b"x"


def test_a_torn_write_leaves_a_sector_aligned_prefix(fs: PowerCut) -> None:
    from tools.powercut.fs import SECTOR  # here: it needs libfuse, which the fixture checks

    m = fs.mount_point
    base = b"s" * 1000
    last = bytes(range(256)) * 40  # 10240 bytes, from offset 1000 + 3000
    tails: set[int] = set()
    for seed in range(8):
        path = m / f"f{seed}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT)
        os.write(fd, base)
        os.fsync(fd)
        fsync_dir(m)
        os.write(fd, b"u" * 3000)  # unsynced, written back whole by the torn cut
        os.write(fd, last)  # the last write: torn
        n = power_cut(fs, torn=True, seed=seed)
        with contextlib.suppress(OSError):  # its mount is gone with the power
            os.close(fd)
        assert n >= 1
        got = path.read_bytes()
        assert got[:1000] == base
        assert got[1000:4000] == b"u" * 3000
        kept = got[4000:]
        assert kept == last[: len(kept)], "a prefix of the last write, nothing else"
        assert len(kept) < len(last)
        assert len(kept) == 0 or len(got) % SECTOR == 0, "torn at a sector boundary"
        tails.add(len(kept))
    assert len(tails) > 1, "the seed chooses where the write is torn"
