"""ROCKTIMER_WORKERS unset: one worker process per core the server may run on, capped at
the partitions of a data dir made before (app/cluster/layout.py); real processes."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_partitions import topics_of, workers_of
from tests.support.process import HOST, ROOT
from tests.support.server import Server

pytestmark = pytest.mark.slow

CORES = len(os.sched_getaffinity(0))  # the server inherits the test's affinity
DEFAULT = {"ROCKTIMER_WORKERS": None, "ROCKTIMER_LOG_LEVEL": "info"}  # the variable unset


@pytest.mark.skipif(CORES < 2, reason="one core: the default is the one process")
def test_unset_runs_one_worker_per_core_on_a_new_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Server(data, env=DEFAULT) as srv:
        assert set(workers_of(srv)) == set(range(CORES))
        assert (data / "partitions.json").read_text() == (
            f'{{"partitions": {CORES}, "hash": "crc32"}}\n'
        )
        assert f"{CORES} workers, {CORES} partitions" in srv.logs()
        assert "not one per core" not in srv.logs()
        with httpx.Client(base_url=srv.url) as c:
            for t in topics_of(0, CORES, 1, "d") + topics_of(CORES - 1, CORES, 1, "d"):
                assert c.post(f"/v1/topics/{t}/messages", json={"body": t}).status_code == 201
            assert len(c.get("/v1/topics").json()["items"]) == 2
    assert not (data / "CURRENT").exists()  # a store per partition, none at the root


@pytest.mark.skipif(CORES < 2, reason="one core: the default is the one process")
def test_unset_serves_a_one_process_data_dir_with_one_process_and_says_so(
    tmp_path: Path,
) -> None:
    """A data dir made by one process (its store at the root: one partition) keeps its
    layout under the default: one process, one line saying why, its messages there."""
    data = tmp_path / "data"
    with Server(data, env={"ROCKTIMER_WORKERS": "1"}) as srv, httpx.Client(base_url=srv.url) as c:
        sent = c.post("/v1/topics/old/messages", json={"msg_id": "m", "body": "x"})
        assert sent.status_code == 201
    with Server(data, env=DEFAULT) as srv, httpx.Client(base_url=srv.url) as c:
        assert workers_of(srv) == {}  # no supervisor: the one process, as before
        assert c.get("/v1/topics/old/messages/m").json()["state"] == "delivered"
        said = [line for line in srv.logs().splitlines() if "not one per core" in line]
        assert len(said) == 1, srv.logs()
        assert f"the data dir {data} has 1 partition: 1 worker process" in said[0]
        assert f"({CORES})" in said[0]
    assert not (data / "partitions.json").exists()
    assert (data / "CURRENT").exists()


def test_unset_on_port_0_is_the_one_process(tmp_path: Path) -> None:
    """Workers share one port, which port 0 cannot name: the default there is one process."""
    data = tmp_path / "data"
    env = {
        **{k: v for k, v in os.environ.items() if k != "ROCKTIMER_WORKERS"},
        "ROCKTIMER_HOST": HOST,
        "ROCKTIMER_PORT": "0",
        "ROCKTIMER_DATA_DIR": str(data),
        "ROCKTIMER_LOG_LEVEL": "info",
    }
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "app"], cwd=ROOT, env=env, stderr=out)
    try:
        port = None
        for _ in range(600):  # up to 30 s
            found = re.search(rf"ready on http://{HOST}:(\d+)", log.read_text())
            if found:
                port = int(found.group(1))
                break
            assert proc.poll() is None, log.read_text()
            time.sleep(0.05)
        assert port, log.read_text()
        r = httpx.post(f"http://{HOST}:{port}/v1/topics/a/messages", json={"body": "x"})
        assert r.status_code == 201
        assert not (data / "partitions.json").exists()
        assert (data / "CURRENT").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_port_held_by_another_process_stops_the_workers_start_in_one_line(
    tmp_path: Path,
) -> None:
    """Several workers bind the port with SO_REUSEPORT: one held by another process is one
    line and exit 1 from the supervisor, before the data dir is made; no worker starts
    (each would fail in turn and be started again)."""
    with socket.socket() as holder:
        holder.bind((HOST, 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {
            **os.environ,
            "ROCKTIMER_HOST": HOST,
            "ROCKTIMER_PORT": str(port),
            "ROCKTIMER_DATA_DIR": str(tmp_path / "data"),
            "ROCKTIMER_WORKERS": "2",
            "ROCKTIMER_LOG_LEVEL": "info",
        }
        try:
            done = subprocess.run(
                [sys.executable, "-m", "app"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"it went on starting workers: {exc.stderr!r}") from None
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"rocktimer: cannot listen on {HOST}:{port}: another process holds the port (stop "
        "it, or set ROCKTIMER_PORT to another port)"
    ], done.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(("first", "second"), [(2, 2), (1, 2), (2, 1), (1, 1)])
def test_a_second_rocktimer_on_a_served_port_stops_in_one_line(
    tmp_path: Path, first: int, second: int
) -> None:
    """Workers bind the port with SO_REUSEPORT, which a second rocktimer's workers could
    share (its data dir another): whatever N each runs, the second start is one line and
    exit 2, before its data dir is made, and the first serves on, every partition."""
    with Server(tmp_path / "one", env={"ROCKTIMER_WORKERS": str(first)}) as srv:
        assert len(workers_of(srv)) == (0 if first == 1 else first)
        env = {
            **os.environ,
            "ROCKTIMER_HOST": HOST,
            "ROCKTIMER_PORT": str(srv.port),
            "ROCKTIMER_DATA_DIR": str(tmp_path / "two"),
            "ROCKTIMER_WORKERS": str(second),
        }
        with subprocess.Popen(
            [sys.executable, "-m", "app"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.terminate()
                _, err = proc.communicate(timeout=30)
                raise AssertionError(f"the second one served the port too: {err!r}") from None
        assert proc.returncode == 2, err
        assert err.splitlines() == [
            f"rocktimer: cannot listen on {HOST}:{srv.port}: another rocktimer serves this "
            "port (stop it, or set ROCKTIMER_PORT to another port)"
        ], err
        assert not (tmp_path / "two").exists()
        with httpx.Client(base_url=srv.url) as c:
            for t in topics_of(0, 2, 2, "s") + topics_of(1, 2, 2, "s"):
                r = c.post(f"/v1/topics/{t}/messages", json={"body": t})
                assert r.status_code == 201, r.text
            assert len(c.get("/v1/topics").json()["items"]) == 4
        srv.check_alive()


def test_port_0_cannot_serve_a_partitioned_data_dir(tmp_path: Path) -> None:
    """Its partitions need workers on one port, which port 0 cannot name: one line, exit 2,
    whether ROCKTIMER_WORKERS is unset (one worker) or set."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "partitions.json").write_text('{"partitions": 2, "hash": "crc32"}\n')
    for workers in (None, "1", "2"):
        env = {k: v for k, v in os.environ.items() if k != "ROCKTIMER_WORKERS"}
        env |= {"ROCKTIMER_PORT": "0", "ROCKTIMER_DATA_DIR": str(data)}
        if workers:
            env["ROCKTIMER_WORKERS"] = workers
        done = subprocess.run(
            [sys.executable, "-m", "app"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            f"rocktimer: the data dir {data} has 2 partitions, served by worker processes "
            "that share one port: set ROCKTIMER_PORT to a port, not 0"
        ]
