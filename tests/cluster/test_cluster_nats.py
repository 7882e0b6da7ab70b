"""One NATS server of three is SIGKILLed (the one leading the changelog stream, whose loss
costs a leader election) under load: writes resume on the other two, nothing acknowledged
is lost (the cluster crash loop's ledger, tools/cluster_crash.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.loop import run_loop
from tools import cluster_crash


@pytest.mark.slow
def test_cluster_nats_server_killed_writes_resume_nothing_lost(tmp_path: Path) -> None:
    # a short lease: the nodes' leases are not what fails over here, and it keeps the final
    # wait for settled owners short
    summary, report = run_loop(
        tmp_path, [cluster_crash.KILL_NATS], cycles=1, load_s=2.0, lease_ms=1_500
    )
    assert max(summary.failover_s) <= cluster_crash.FAILOVER_LIMIT_S, report
