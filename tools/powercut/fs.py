"""The power-cut file system: a FUSE passthrough that keeps apart what was never synced.

Two real directory trees under one state directory stand for the two sides of a page
cache:

- ``live/`` is what processes on the mount see: every write, create, rename and unlink
  lands there at once (reads see unsynced data, as they see the page cache's);
- ``disk/`` is what a power cut leaves: a file's bytes reach it only when the file is
  fsynced (``fsync`` or ``fdatasync``, which reach FUSE as FSYNC; ``sync_file_range``
  never reaches a FUSE daemon, so it syncs nothing here, as RocksDB expects of it), and a
  directory's entries (creates, renames, unlinks, hard links, subdirectories) only when
  that directory is fsynced (FSYNCDIR).

A file of ``disk/`` is a hard link to its inode's bytes in ``inodes/<id>``: a rename
keeps the inode, so a file renamed and fsynced under its old name and its directory
fsynced later has its synced bytes under the new name, as on a journaling file system.
A file whose name reached ``disk/`` before its bytes were synced is there, empty (or as
of its last fsync).

A power cut (``cut``) throws ``live/`` away: the next start copies ``disk/`` to
``live/``. In torn mode the cut first writes back, for each open file with unsynced
writes that has a durable inode, every unsynced write but the last in full and the last one up
to a sector boundary (chosen by the seed): writeback that was under way when the power
went, ``the kernel wrote some pages of the last write``.

RocksDB, as the service opens it (its OPTIONS file), fits this model: it syncs with
``fdatasync`` (``use_fsync=false``) and fsyncs its directory after each file it makes;
it reads and writes with ``pread``/``write`` (no mmap: ``allow_mmap_reads`` and
``allow_mmap_writes`` are false; no O_DIRECT); its ``sync_file_range`` calls
(``bytes_per_sync``) only pace writeback, and its WAL preallocation
(``fallocate(FALLOC_FL_KEEP_SIZE)``) is taken as the hint it is.

What is not modelled: metadata (mode, owner, times) is never lost; a directory renamed
is kept by path; a directory fsynced before its own entry in its parent was is kept apart
(``UNLINKED``) until that entry is synced; symlinks are served but never made durable.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mfusepy import FuseOSError, Operations

SECTOR = 512  # a torn write keeps a prefix that ends on a multiple of this (absolute)
UNLINKED = ".powercut-unlinked"  # in a disk/ directory fsynced before its parent's entry
LIVE, DISK, INODES = "live", "disk", "inodes"

T = TypeVar("T")


@dataclass
class Node:
    """One live inode: its durable id (None until it has bytes or a name on disk) and the
    byte ranges written since its last fsync, in the order written."""

    id: str | None = None
    writes: list[tuple[int, int]] = field(default_factory=list)
    resized: bool = False


def merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(offset, length) ranges as disjoint sorted ones."""
    out: list[tuple[int, int]] = []
    for off, length in sorted(ranges):
        if out and off <= out[-1][0] + out[-1][1]:
            last_off, last_len = out[-1]
            out[-1] = (last_off, max(last_len, off + length - last_off))
        else:
            out.append((off, length))
    return out


def _copy_range(src: int, dst: int, off: int, length: int) -> None:
    end = off + length
    while off < end:
        data = os.pread(src, min(1 << 20, end - off), off)
        if not data:
            return
        os.pwrite(dst, data, off)
        off += len(data)


def restore(state: str) -> None:
    """Lay ``live/`` anew from ``disk/`` (what survived the last cut) and drop inodes no
    durable name links to. The first start makes both empty."""
    live, disk, inodes = (os.path.join(state, d) for d in (LIVE, DISK, INODES))
    os.makedirs(disk, exist_ok=True)
    os.makedirs(inodes, exist_ok=True)
    shutil.rmtree(live, ignore_errors=True)
    os.makedirs(live)
    for here, dirs, files in os.walk(disk):
        dirs[:] = [d for d in dirs if not os.path.exists(os.path.join(here, d, UNLINKED))]
        rel = os.path.relpath(here, disk)
        target = os.path.join(live, rel) if rel != "." else live
        os.makedirs(target, exist_ok=True)
        for name in files:
            if name != UNLINKED:
                shutil.copyfile(os.path.join(here, name), os.path.join(target, name))
    for name in os.listdir(inodes):
        path = os.path.join(inodes, name)
        if os.stat(path).st_nlink == 1:
            os.unlink(path)


class PowerCutFS(Operations):  # type: ignore[misc]
    """The FUSE operations, each under one lock (``gate``): ``freeze`` takes it once,
    after which every operation fails and nothing more reaches either tree."""

    use_ns = True

    def __init__(self, state: str) -> None:
        self.live = os.path.join(state, LIVE)
        self.disk = os.path.join(state, DISK)
        self.inodes = os.path.join(state, INODES)
        self.gate = threading.Lock()
        self.dead = False  # cut: every operation fails from now on
        self.nodes: dict[int, Node] = {}
        self.fh_ino: dict[int, int] = {}
        self.next_id = 1 + max((int(n) for n in os.listdir(self.inodes)), default=0)
        self.syncs = 0
        self.dir_syncs = 0
        self._adopt()

    def _adopt(self) -> None:
        """Tie each live file to the inode its disk/ name links to (after ``restore``)."""
        by_ino = {os.stat(self._ip(n)).st_ino: n for n in os.listdir(self.inodes)}
        for here, _, files in os.walk(self.live):
            rel = os.path.relpath(here, self.live)
            for name in files:
                disk = os.path.normpath(os.path.join(self.disk, rel, name))
                ident = by_ino.get(os.stat(disk).st_ino)
                self.nodes[os.stat(os.path.join(here, name)).st_ino] = Node(ident)

    # --- helpers -------------------------------------------------------------------------

    def _ip(self, ident: str) -> str:
        return os.path.join(self.inodes, ident)

    def _lp(self, path: str) -> str:
        return os.path.join(self.live, path.lstrip("/"))

    def _dp(self, path: str) -> str:
        return os.path.join(self.disk, path.lstrip("/"))

    def _run(self, fn: Callable[[], T]) -> T:
        with self.gate:
            if self.dead:
                raise FuseOSError(errno.EIO)
            try:
                return fn()
            except OSError as exc:
                raise FuseOSError(exc.errno or errno.EIO) from None

    def _do(self, fn: Callable[[], None]) -> int:
        self._run(fn)
        return 0

    def _node(self, ino: int) -> Node:
        node = self.nodes.get(ino)
        if node is None:
            node = self.nodes[ino] = Node()
        return node

    def _new_id(self, node: Node) -> str:
        if node.id is None:
            node.id = str(self.next_id)
            self.next_id += 1
            with open(self._ip(node.id), "xb"):
                pass
        return node.id

    def _gone(self, live_path: str) -> Callable[[], None]:
        """Before a name is unlinked or replaced: after it, forget its inode if that was
        its last link (the backing file system may hand the number to a new file)."""
        try:
            st = os.lstat(live_path)
        except FileNotFoundError:
            return lambda: None

        def after() -> None:
            if stat.S_ISREG(st.st_mode) and st.st_nlink <= 1:
                self.nodes.pop(st.st_ino, None)

        return after

    # --- the page cache side -------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            st = os.fstat(fh) if fh is not None else os.lstat(self._lp(path))
            out = {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_size", "st_uid")}
            out.update(st_gid=st.st_gid, st_blocks=st.st_blocks, st_blksize=st.st_blksize)
            out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
            return out

        return self._run(run)

    def access(self, path: str, amode: int) -> int:
        def run() -> int:
            if not os.access(self._lp(path), amode):
                raise FuseOSError(errno.EACCES)
            return 0

        return self._run(run)

    def readdir(self, path: str, fh: int) -> Iterator[str]:
        return iter([".", "..", *self._run(lambda: os.listdir(self._lp(path)))])

    def mkdir(self, path: str, mode: int) -> int:
        return self._do(lambda: os.mkdir(self._lp(path), mode))

    def rmdir(self, path: str) -> int:
        return self._do(lambda: os.rmdir(self._lp(path)))

    def chmod(self, path: str, mode: int) -> int:
        return self._do(lambda: os.chmod(self._lp(path), mode))

    def chown(self, path: str, uid: int, gid: int) -> int:
        return self._do(lambda: os.chown(self._lp(path), uid, gid))

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        return self._do(
            lambda: os.utime(self._lp(path), ns=times) if times else os.utime(self._lp(path))
        )

    def statfs(self, path: str) -> dict[str, int]:
        def run() -> dict[str, int]:
            sv = os.statvfs(self._lp(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree")
            out = {k: getattr(sv, k) for k in keys}
            out.update(f_files=sv.f_files, f_flag=sv.f_flag, f_frsize=sv.f_frsize)
            out["f_namemax"] = sv.f_namemax
            return out

        return self._run(run)

    def symlink(self, target: str, source: str) -> int:
        return self._do(lambda: os.symlink(source, self._lp(target)))

    def readlink(self, path: str) -> str:
        return self._run(lambda: os.readlink(self._lp(path)))

    def _opened(self, fd: int) -> int:
        ino = os.fstat(fd).st_ino
        self.fh_ino[fd] = ino
        self._node(ino)
        return fd

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC
        return self._run(lambda: self._opened(os.open(self._lp(path), flags, mode)))

    def open(self, path: str, flags: int) -> int:
        def run() -> int:
            # O_APPEND stays the kernel's: it sends each write with the offset of the end,
            # and a pwrite on an O_APPEND descriptor would ignore that offset. Write-only
            # is opened read-write: a sync reads back the written ranges (_sync_file).
            own = flags & ~(os.O_CREAT | os.O_EXCL | os.O_APPEND)
            if own & os.O_ACCMODE == os.O_WRONLY:
                own = own & ~os.O_ACCMODE | os.O_RDWR
            fd = self._opened(os.open(self._lp(path), own))
            if flags & os.O_TRUNC:
                self._node(self.fh_ino[fd]).resized = True
            return fd

        return self._run(run)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return self._run(lambda: os.pread(fh, size, offset))

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        def run() -> int:
            n = os.pwrite(fh, data, offset)
            self._node(self.fh_ino[fh]).writes.append((offset, n))
            return n

        return self._run(run)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        def run() -> int:
            if fh is not None:
                os.ftruncate(fh, length)
                ino = self.fh_ino[fh]
            else:
                os.truncate(self._lp(path), length)
                ino = os.lstat(self._lp(path)).st_ino
            self._node(ino).resized = True
            return 0

        return self._run(run)

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        def run() -> int:
            if mode == 0:  # grows the file: a size change like a truncate
                os.posix_fallocate(fh, offset, size)
                self._node(self.fh_ino[fh]).resized = True
                return 0
            if mode == 1:  # FALLOC_FL_KEEP_SIZE (RocksDB's WAL preallocation): a hint
                return 0
            raise FuseOSError(errno.EOPNOTSUPP)

        return self._run(run)

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        def run() -> int:
            self.fh_ino.pop(fh, None)
            os.close(fh)
            return 0

        return self._run(run)

    def unlink(self, path: str) -> int:
        def run() -> int:
            after = self._gone(self._lp(path))
            os.unlink(self._lp(path))
            after()
            return 0

        return self._run(run)

    def rename(self, old: str, new: str) -> int:
        def run() -> int:
            after = self._gone(self._lp(new))
            os.rename(self._lp(old), self._lp(new))
            after()
            return 0

        return self._run(run)

    def link(self, target: str, source: str) -> int:
        return self._do(lambda: os.link(self._lp(source), self._lp(target)))

    # --- the disk side -------------------------------------------------------------------

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        def run() -> int:
            self._sync_file(fh, self._node(self.fh_ino[fh]))
            self.syncs += 1
            return 0

        return self._run(run)

    def _sync_file(self, fd: int, node: Node) -> None:
        """The file's bytes to disk: its written ranges, then its size."""
        dst = os.open(self._ip(self._new_id(node)), os.O_WRONLY)
        try:
            for off, length in merged(node.writes):
                _copy_range(fd, dst, off, length)
            os.ftruncate(dst, os.fstat(fd).st_size)
        finally:
            os.close(dst)
        node.writes.clear()
        node.resized = False

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        def run() -> int:
            self._sync_dir(path)
            self.dir_syncs += 1
            return 0

        return self._run(run)

    def _sync_dir(self, path: str) -> None:
        """The directory's entries to disk: each name as it is live, no other name."""
        live, disk = self._lp(path), self._dp(path)
        if not os.path.isdir(disk):
            # Its own entry in its parent is not synced yet (nor, maybe, its parent's):
            # each directory made here is kept apart until its entry is.
            missing = [disk]
            while not os.path.isdir(os.path.dirname(missing[-1])):
                missing.append(os.path.dirname(missing[-1]))
            for d in reversed(missing):
                os.mkdir(d)
                open(os.path.join(d, UNLINKED), "xb").close()
        names = set(os.listdir(live))
        for name in names:
            lp, dp = os.path.join(live, name), os.path.join(disk, name)
            st = os.lstat(lp)
            if stat.S_ISDIR(st.st_mode):
                if os.path.lexists(dp) and not os.path.isdir(dp):
                    os.unlink(dp)
                if os.path.isdir(dp):
                    hidden = os.path.join(dp, UNLINKED)
                    if os.path.exists(hidden):
                        os.unlink(hidden)
                else:
                    os.mkdir(dp)
            elif stat.S_ISREG(st.st_mode):
                target = self._ip(self._new_id(self._node(st.st_ino)))
                if os.path.lexists(dp):
                    if not os.path.isdir(dp) and os.path.samefile(dp, target):
                        continue
                    _remove(dp)
                os.link(target, dp)
        for name in set(os.listdir(disk)) - names - {UNLINKED}:
            _remove(os.path.join(disk, name))

    # --- the power cut -------------------------------------------------------------------

    def freeze(self) -> None:
        """The instant of the cut: the operation under way ends, every later one fails
        (EIO) and reaches neither tree. A process blocked on the mount can still exit,
        as a killed one must (its close() waits for an answer)."""
        with self.gate:
            self.dead = True

    def cut(self, torn: bool, seed: int) -> int:
        """After ``freeze``: with ``torn``, the writeback under way reaches disk/ (see the
        module docstring); returns how many files were torn. ``restore`` at the next
        start drops the rest."""
        rng = random.Random(seed)
        torn_files = 0
        with self.gate:
            assert self.dead, "cut before freeze"
            if torn:
                for fd, ino in sorted(self.fh_ino.items()):
                    node = self.nodes.get(ino)
                    if node is None or node.id is None or not node.writes:
                        continue
                    self._tear(fd, node, rng)
                    torn_files += 1
        return torn_files

    def _tear(self, fd: int, node: Node, rng: random.Random) -> None:
        assert node.id is not None
        dst = os.open(self._ip(node.id), os.O_WRONLY)
        try:
            *whole, (off, length) = node.writes
            for w_off, w_len in whole:
                _copy_range(fd, dst, w_off, w_len)
            end = off + length
            cuts = range((off // SECTOR + 1) * SECTOR, end, SECTOR)
            keep = rng.choice([off, *cuts]) - off  # from nothing of it to all but a sector
            _copy_range(fd, dst, off, keep)
        finally:
            os.close(dst)
        node.writes.clear()


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)
