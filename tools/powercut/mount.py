"""Driving the power-cut file system from a test: mount, freeze, cut, mount again.

A power cut as a test does it::

    SIGSTOP the processes on it  # none of them answers anyone from now on
    fs.freeze()                  # the instant of the cut: nothing more reaches the disk
    SIGKILL them                 # blocked on the mount, they get EIO and exit
    fs.cut(torn, seed)           # unmounted; the unsynced is dropped at the next mount
    fs.mount()                   # what survived, served again
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTROL = "control.sock"  # in the state directory: the server's command socket
MOUNT_TIMEOUT_S = 15.0


def unavailable() -> str | None:
    """Why a FUSE file system cannot be mounted here, or None if it can."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine (a container without the FUSE device)"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (Debian's fuse3 package: apt-get install fuse3)"
    try:  # only here: this module is imported where FUSE may be missing
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:  # OSError: libfuse3 itself is missing
        return f"the FUSE library cannot be loaded: {exc}"
    return None


class PowerCut:
    """One power-cut file system: the state directory and the mount point it serves."""

    def __init__(self, state: Path, mount: Path, log: Path) -> None:
        self.state = state
        self.mount_point = mount
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.cuts = 0
        self.torn = 0  # files torn over all cuts

    @property
    def mounted(self) -> bool:
        return self.proc is not None

    def mount(self) -> None:
        """Serve what the state's disk holds (empty at first) on the mount point."""
        assert self.proc is None, "already mounted"
        self.state.mkdir(parents=True, exist_ok=True)
        self.mount_point.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tools.powercut", str(self.state), str(self.mount_point)],
                cwd=ROOT,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not (os.path.ismount(self.mount_point) and self._answers()):
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError(f"the power-cut file system exited: {self._tail()}")
            if time.monotonic() > deadline:
                self.unmount()
                raise RuntimeError(f"not mounted in {MOUNT_TIMEOUT_S}s: {self._tail()}")
            time.sleep(0.02)

    def _answers(self) -> bool:
        try:
            return self.command("stats").startswith("syncs")
        except OSError:
            return False

    def command(self, line: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(MOUNT_TIMEOUT_S)
            s.connect(str(self.state / CONTROL))
            s.sendall(line.encode() + b"\n")
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
        return reply.decode().strip()

    def freeze(self) -> None:
        reply = self.command("freeze")
        if reply != "frozen":
            raise RuntimeError(f"freeze answered {reply!r}")

    def cut(self, torn: bool, seed: int) -> int:
        """Drop what was not synced (after ``freeze``), then unmount; returns the files
        torn. ``mount`` serves what survived."""
        reply = self.command(f"cut {int(torn)} {seed}")
        if not reply.startswith("cut "):
            raise RuntimeError(f"cut answered {reply!r}")
        n = int(reply.split()[1])
        self.cuts += 1
        self.torn += n
        self.unmount()
        return n

    def unmount(self) -> None:
        """Stop serving (a file still open on the mount then fails with ENOTCONN) and
        unmount. Unsynced state is not written back: the next mount drops it."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()  # it keeps nothing worth a clean exit: disk/ is complete
            proc.wait()
        subprocess.run(
            ["fusermount3", "-u", "-z", str(self.mount_point)],
            check=False,
            capture_output=True,
        )

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
