"""A cluster node's start (app/cluster/node.py): what cluster mode needs of the settings, the
cluster's number of partitions recorded by the first node (another one: one line, exit 2),
and a single machine that never imports NATS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.cluster import NODE_READY_S, PARTITIONS, Node
from tests.support.nats import NatsCluster, wait_until
from tests.support.process import ROOT

EXIT_BAD_SETTING = 2


def run_app(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app"],
        check=False,
        cwd=ROOT,
        env={
            **os.environ,
            "ROCKTIMER_HOST": "127.0.0.1",
            "ROCKTIMER_PORT": "0",
            "ROCKTIMER_DATA_DIR": str(tmp_path / "data"),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("rocktimer: "), stderr
    return lines[0]


def test_cluster_mode_without_a_node_id_says_so_and_exits_2(tmp_path: Path) -> None:
    done = run_app({"ROCKTIMER_CLUSTER": "nats://127.0.0.1:1"}, tmp_path)
    assert done.returncode == EXIT_BAD_SETTING
    assert "ROCKTIMER_NODE_ID" in one_line(done.stderr)
    assert not (tmp_path / "data").exists()  # nothing was created


def test_bad_cluster_settings_name_the_variable_and_exit_2(tmp_path: Path) -> None:
    for env, named in [
        ({"ROCKTIMER_CLUSTER": "http://127.0.0.1:4222"}, "ROCKTIMER_CLUSTER"),
        ({"ROCKTIMER_CLUSTER": "nats://h:1", "ROCKTIMER_NODE_ID": "a b"}, "ROCKTIMER_NODE_ID"),
        ({"ROCKTIMER_ADVERTISE": "nohost"}, "ROCKTIMER_ADVERTISE"),
        ({"ROCKTIMER_LEASE_MS": "10"}, "ROCKTIMER_LEASE_MS"),
        ({"ROCKTIMER_REPLICAS": "0"}, "ROCKTIMER_REPLICAS"),
        (
            {"ROCKTIMER_CLUSTER": "nats://h:1", "ROCKTIMER_NODE_ID": "a", "ROCKTIMER_WORKERS": "2"},
            "ROCKTIMER_WORKERS",
        ),
    ]:
        done = run_app(env, tmp_path)
        assert done.returncode == EXIT_BAD_SETTING, (env, done.stderr)
        assert named in one_line(done.stderr), env


def test_a_single_machine_never_imports_nats() -> None:
    code = (
        "import sys, app.__main__, app.cluster.worker, app.cluster.supervisor;"
        "print(sorted(m for m in sys.modules if m == 'nats' or m.startswith('nats.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_node_with_another_number_of_partitions_says_so_and_exits_2(
    nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    first = Node("node1", tmp_path, nats_cluster.urls, {})
    other = Node("node2", tmp_path, nats_cluster.urls, {"ROCKTIMER_PARTITIONS": "4"})
    try:
        first.spawn()

        def ready() -> bool | None:
            first.check_alive()
            return first.answers() or None

        wait_until("node1 ready", ready, NODE_READY_S)  # the cluster's P is recorded
        other.spawn()
        assert other.proc is not None
        code = other.proc.wait(timeout=60)
        assert code == EXIT_BAD_SETTING, other.tail()
        line = one_line(other.logs())
        assert f"has {PARTITIONS} partitions" in line
        assert "ROCKTIMER_PARTITIONS=4" in line
        first.check_alive()  # the cluster goes on
    finally:
        other.kill()
        first.kill()
