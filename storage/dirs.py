"""Directories whose entries survive a power cut.

A file's fsync makes its bytes durable, not its name: a new file, a rename or a new
directory is durable only once the directory holding the name is fsynced (POSIX; ext4
and XFS do lose them). RocksDB fsyncs its own directory after each file it makes; what
the service makes itself (the data dir, the event log's directories and segments) goes
through here. tools/powerloss.py cuts the power to check it.
"""

from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    """Make the names in ``path`` (new, renamed, removed) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, and each directory it made durable: the
    parent of each is fsynced, outermost first."""
    made: list[str] = []
    at = os.path.abspath(path)
    while not os.path.isdir(at):
        made.append(at)
        at = os.path.dirname(at)
    if not made:
        return
    os.makedirs(path, exist_ok=True)
    for d in reversed(made):
        fsync_dir(os.path.dirname(d))
