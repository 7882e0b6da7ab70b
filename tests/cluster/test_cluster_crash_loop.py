"""The cluster crash loop: 20 SIGKILLs of a partition's owner under mixed load, each killed
node started again (it rejoins as a standby), the checks after every 4 kills and the exact
checks at the end (tools/cluster_crash.py).

Kills are made fast so that 20 fit in `make test`: a short lease (ROCKTIMER_LEASE_MS=1000),
and 4 owners killed one after the other under one load, each once the last victim is back;
CLUSTER_CRASH_CYCLES=n runs more cycles, `make crash-cluster` the long loop with the default
lease. CRASH_LOOP_SEED=n replays a failing seed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cluster.loop import run_loop
from tools import cluster_crash

OWNER_KILLS = 20  # the issue: 0 violations over >= 20 owner kills
KILLS_PER_CYCLE = 4
LEASE_MS = 1_000


@pytest.mark.slow
def test_cluster_crash_loop_owner_kills(tmp_path: Path) -> None:
    cycles = max(OWNER_KILLS // KILLS_PER_CYCLE, int(os.environ.get("CLUSTER_CRASH_CYCLES") or 0))
    summary, report = run_loop(
        tmp_path,
        [cluster_crash.KILL_OWNER],
        cycles=cycles,
        load_s=1.0,
        lease_ms=LEASE_MS,
        kills_per_cycle=KILLS_PER_CYCLE,
    )
    assert len(summary.failover_s) >= OWNER_KILLS, report
    assert max(summary.failover_s) <= cluster_crash.FAILOVER_LIMIT_S, report
    assert summary.stats["due_in_failover"] > 0, report
