"""``python -m tools.powercut STATE MOUNT``: serve the power-cut file system of the state
directory STATE on MOUNT (in the foreground, until unmounted).

It first lays STATE/live anew from STATE/disk (what the last cut left), then listens on
STATE/control.sock for one-line commands, each answered with one line:

- ``freeze``: the power goes: every file operation fails from now on (EIO) and
  reaches neither tree; answers ``frozen``;
- ``cut TORN SEED`` (after a freeze): TORN 1 tears the writeback under way
  (tools/powercut/fs.py); answers ``cut N`` (N files torn); the mount is then to be
  unmounted (``fusermount3 -u -z MOUNT``) and served again by a new process;
- ``stats``: answers ``syncs N dir_syncs M``.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading

from mfusepy import FUSE

from tools.powercut.fs import PowerCutFS, restore
from tools.powercut.mount import CONTROL


def serve_control(fs: PowerCutFS, path: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(4)
        while True:
            conn, _ = server.accept()
            with conn, conn.makefile("rw") as f:
                for line in f:
                    f.write(answer(fs, line.split()) + "\n")
                    f.flush()


def answer(fs: PowerCutFS, words: list[str]) -> str:
    if words == ["freeze"]:
        fs.freeze()
        return "frozen"
    if len(words) == 3 and words[0] == "cut":
        return f"cut {fs.cut(words[1] == '1', int(words[2]))}"
    if words == ["stats"]:
        return f"syncs {fs.syncs} dir_syncs {fs.dir_syncs}"
    return f"error: unknown command {' '.join(words)!r}"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tools.powercut STATE MOUNT", file=sys.stderr)
        return 2
    state, mount = (os.path.abspath(a) for a in argv)
    logging.basicConfig(level=logging.WARNING)
    restore(state)
    fs = PowerCutFS(state)
    control = os.path.join(state, CONTROL)
    if os.path.exists(control):
        os.unlink(control)
    threading.Thread(target=serve_control, args=(fs, control), daemon=True).start()
    FUSE(fs, mount, foreground=True, fsname="powercut")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
