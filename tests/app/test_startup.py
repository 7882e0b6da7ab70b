"""What stops a start is said in one line naming the setting and what it accepts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app.__main__ import EXIT_BAD_SETTING, EXIT_CANNOT_START, load_settings
from tests.support.process import HOST, AppProcess


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"ROCKTIMER_PORT": "70000"}, ["ROCKTIMER_PORT='70000'", "an integer from 0 to 65535"]),
        (
            {"ROCKTIMER_API_KEYS": '{"k1": "producer", "k2": "root"}'},
            ["ROCKTIMER_API_KEYS ('k2')", "'producer', 'consumer' or 'admin'"],
        ),
        ({"ROCKTIMER_API_KEYS": "k1=admin"}, ["ROCKTIMER_API_KEYS", "not valid JSON"]),
        ({"ROCKTIMER_LOG_FORMAT": "xml"}, ["ROCKTIMER_LOG_FORMAT='xml'", "text | json"]),
        ({"ROCKTIMER_ACCESS_LOG": "maybe"}, ["ROCKTIMER_ACCESS_LOG='maybe'", "true or false"]),
        ({"ROCKTIMER_SCAN_CHUNK": "0"}, ["ROCKTIMER_SCAN_CHUNK='0'", "an integer >= 1"]),
        (
            {"ROCKTIMER_PORT": "x", "ROCKTIMER_LOG_LEVEL": "loud"},
            ["ROCKTIMER_PORT='x'", "ROCKTIMER_LOG_LEVEL='loud'", "debug | info"],
        ),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    names: list[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as stopped:
        load_settings()
    assert stopped.value.code == EXIT_BAD_SETTING
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("rocktimer: bad setting ")
    for name in names:
        assert name in err, err


def test_a_port_in_use_is_one_line_before_anything_says_ready(tmp_path: Path) -> None:
    """Issue 30 F19: with the port taken, the log said "rocktimer ready" before the bind
    error. The port is bound first: one line naming it, exit 1, the store never opened."""
    with socket.socket() as holder:
        holder.bind((HOST, 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {
            **os.environ,
            "ROCKTIMER_HOST": HOST,
            "ROCKTIMER_PORT": str(port),
            "ROCKTIMER_DATA_DIR": str(tmp_path / "data"),
            "ROCKTIMER_LOG_LEVEL": "info",
        }
        done = subprocess.run(
            [sys.executable, "-m", "app"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == EXIT_CANNOT_START, done
    assert "ready" not in done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert lines == [lines[0]], done.stderr
    assert lines[0].startswith(f"rocktimer: cannot listen on {HOST}:{port}: another process")
    assert not (tmp_path / "data").exists()  # the store was never opened


def test_ready_is_said_once_the_server_serves(tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    server = AppProcess(tmp_path / "data", log_path, {"ROCKTIMER_LOG_LEVEL": "info"})
    with server:
        said = [line for line in server.logs().splitlines() if "rocktimer ready" in line]
        assert len(said) == 1, server.logs()
        assert f"http://{HOST}:{server.port}" in said[0]
