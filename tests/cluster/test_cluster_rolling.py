"""A rolling restart under load: every rocktimer node, then every NATS server, stopped
cleanly (SIGTERM) and started again, one at a time, while producers, a canceller and
consumers run: 0 loss, 0 delivery to a group after its ack was answered, every message in
its topic log exactly once (the cluster crash loop's ledger, tools/cluster_crash.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.loop import run_loop
from tools import cluster_crash


@pytest.mark.slow
def test_cluster_rolling_restart_of_every_node_and_nats_server(tmp_path: Path) -> None:
    steps = cluster_crash.ROLLING
    summary, report = run_loop(tmp_path, steps, cycles=len(steps), load_s=1.5, lease_ms=1_500)
    # each step's writes resumed in time (a "slow-failover" violation otherwise: summary.ok)
    assert max(summary.failover_s) <= cluster_crash.NATS_FAILOVER_LIMIT_S, report
    assert len(summary.ready_s) >= 1 + 3, report  # the start, then each node again
