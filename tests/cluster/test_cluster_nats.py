"""One NATS server of three is SIGKILLed (the one leading the changelog stream, whose loss
costs a leader election) under load: writes resume on the other two within
NATS_FAILOVER_LIMIT_S, nothing acknowledged is lost (the cluster crash loop's ledger,
tools/cluster_crash.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.loop import run_loop
from tools import cluster_crash


@pytest.mark.slow
def test_cluster_nats_server_killed_writes_resume_nothing_lost(tmp_path: Path) -> None:
    # the service's default lease: how long owners ride out JetStream's leader elections
    summary, report = run_loop(tmp_path, [cluster_crash.KILL_NATS], cycles=1, load_s=2.0)
    assert max(summary.failover_s) <= cluster_crash.NATS_FAILOVER_LIMIT_S, report
