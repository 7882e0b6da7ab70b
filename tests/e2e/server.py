"""A real rocktimer server process on 127.0.0.1 (random free port), for end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """``python -m app`` as a child process; start, SIGKILL, SIGTERM, restart on one data dir."""

    def __init__(self, data_dir: Path, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.extra_env = env or {}
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        env = {
            **os.environ,
            "ROCKTIMER_HOST": "127.0.0.1",
            "ROCKTIMER_PORT": str(self.port),
            "ROCKTIMER_DATA_DIR": str(self.data_dir),
            "ROCKTIMER_LOG_LEVEL": "warning",
            **self.extra_env,
        }
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app"], cwd=ROOT, env=env, stdout=log, stderr=log
        )
        log.close()
        self.wait_ready()
        return self

    def wait_ready(self) -> float:
        """Poll /readyz until 200; returns the seconds it took."""
        started = time.monotonic()
        deadline = started + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.logs()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return time.monotonic() - started
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server not ready in {START_TIMEOUT_S}s: {self.logs()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None

    def terminate(self) -> int:
        """SIGTERM: a clean stop; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.proc = None
        return code

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc is not None:
            self.terminate()
