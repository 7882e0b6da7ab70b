"""The changelog's record format (app/cluster/replica/codec.py), without NATS: a commit comes
back as written, a record too large for one message is cut into parts that join again,
and a damaged record is a CorruptRecordError, never a wrong write; a snapshot archive
holding anything but files and directories inside its own dir is refused."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from app.cluster.replica import codec, snapshot
from storage.errors import CorruptRecordError
from storage.store import CF, DeleteRange, RocksStore


def commit(n: int, seed: int = 0) -> codec.Commit:
    staged: codec.Staged = {cf: {} for cf in CF.ALL}
    for i in range(n):
        staged[CF.MESSAGES][f"k{seed}-{i}".encode()] = os.urandom(i % 40)
        staged[CF.TIMERS][f"t{seed}-{i}".encode()] = b"" if i % 3 else None
    return [DeleteRange(CF.LOGS, b"a", b"b")], staged


def written(c: codec.Commit) -> codec.Commit:
    ranges, staged = c
    return list(ranges), {cf: values for cf, values in staged.items() if values}


def test_replica_commits_come_back_as_written() -> None:
    commits = [commit(50, 1), commit(0, 2), commit(7, 3)]
    body = codec.encode_commits(commits)
    assert list(codec.decode_commits(body)) == [written(c) for c in commits]


def test_replica_a_large_body_is_cut_into_parts_that_join_again() -> None:
    body = codec.encode_commits([commit(3000)])
    records = codec.split(body, 4096)
    assert len(records) > 2
    assert all(len(r) <= 4096 for r in records)
    assert [r[:1] for r in records] == [codec.PART] * (len(records) - 1) + [codec.LAST_PART]
    assert b"".join(r[1:] for r in records) == body
    assert codec.split(body, len(body) + 1) == [codec.COMMITS + body]


def test_replica_a_fence_carries_its_writes() -> None:
    writes: codec.Staged = {CF.META: {b"receipt-secret": b"s" * 32}}
    fence = codec.decode_fence(codec.fence_record("node-1", 7, [((), writes)]))
    assert (fence.node, fence.epoch) == ("node-1", 7)
    assert list(codec.decode_commits(fence.body)) == [([], writes)]


@pytest.mark.parametrize("cut", [1, 5, 13, 40])
def test_replica_a_damaged_record_is_corrupt(cut: int) -> None:
    body = codec.encode_commits([commit(20)])
    with pytest.raises(CorruptRecordError):
        list(codec.decode_commits(body[:-cut]))
    with pytest.raises(CorruptRecordError):
        codec.decode_fence(codec.FENCE + b"\x05\x00\x00\x00{not")


def test_replica_commits_apply_as_one_batch_with_the_seq(tmp_path: Path) -> None:
    """RocksStore.write_commits: the commits in order, then the extra puts."""
    store = RocksStore(os.path.join(str(tmp_path), "db"))
    try:
        first: codec.Commit = ((), {CF.META: {b"x": b"1", b"y": b"1"}})
        second: codec.Commit = ((), {CF.META: {b"x": None, b"y": b"2"}})
        store.write_commits([first, second], [], sync=False)
        assert store.get(CF.META, b"x") is None
        assert store.get(CF.META, b"y") == b"2"
    finally:
        store.close()


@pytest.mark.parametrize("name", ["../outside", "/etc/x", "ok/../../outside"])
def test_replica_a_snapshot_with_a_member_outside_its_dir_is_refused(
    tmp_path: Path, name: str
) -> None:
    tar_path = tmp_path / "bad.tar"
    with tarfile.open(tar_path, "w") as tar:
        info = tarfile.TarInfo(name)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with tarfile.open(tar_path) as tar, pytest.raises(tarfile.TarError, match="unexpected"):
        snapshot._extract(tar, str(tmp_path / "into"))
    assert not (tmp_path / "outside").exists()


def test_replica_a_snapshot_with_a_link_is_refused(tmp_path: Path) -> None:
    tar_path = tmp_path / "link.tar"
    with tarfile.open(tar_path, "w") as tar:
        info = tarfile.TarInfo("CURRENT")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    with tarfile.open(tar_path) as tar, pytest.raises(tarfile.TarError, match="unexpected"):
        snapshot._extract(tar, str(tmp_path / "into"))
