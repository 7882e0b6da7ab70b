"""A real rocktimer server process on 127.0.0.1 (random free port), for end-to-end tests:
the bench's own server process (tests/support/process.py), with the tests' log file and stop."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from tests.support.process import AppProcess


class Server(AppProcess):
    """``python -m app`` as a child process; start, SIGKILL, SIGTERM, restart on one data dir."""

    def __init__(self, data_dir: Path, env: Mapping[str, str | None] | None = None) -> None:
        super().__init__(data_dir, data_dir.parent / f"{data_dir.name}-server.log", env)

    def start(self) -> Server:
        super().start()
        return self

    def __enter__(self) -> Server:
        return self.start()

    def wait_ready(self) -> float:
        """Poll /readyz until 200; returns the seconds it took."""
        started = time.monotonic()
        self._wait_ready()
        return time.monotonic() - started

    def terminate(self) -> int:
        """SIGTERM: a clean stop; returns the exit code."""
        code = self.stop()
        assert code is not None, "the server was not running"
        return code
