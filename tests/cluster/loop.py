"""Running the cluster crash loop (tools/cluster_crash.py) from a test: a random seed per run,
printed (CRASH_LOOP_SEED=n replays one), the report in the assertion message."""

from __future__ import annotations

import io
import os
import random
from collections.abc import Sequence
from pathlib import Path

from tools import cluster_crash
from tools.crash_loop import Summary


def run_loop(
    tmp_path: Path,
    disruptions: Sequence[str],
    cycles: int,
    load_s: float,
    lease_ms: int | None = None,
    kills_per_cycle: int = 1,
) -> tuple[Summary, str]:
    """Run the loop, assert it found no violation and measured every failover; returns the
    summary and its report."""
    seed = int(os.environ.get("CRASH_LOOP_SEED") or random.SystemRandom().randrange(2**32))
    out = io.StringIO()
    summary = cluster_crash.run(
        cluster_crash.ClusterConfig(
            cycles=cycles,
            seed=seed,
            load_s=load_s,
            data_dir=tmp_path / "cluster",
            disruptions=tuple(disruptions),
            lease_ms=lease_ms,
            kills_per_cycle=kills_per_cycle,
        ),
        out,
    )
    report = f"{out.getvalue()}{summary.report()}"
    print(report)
    assert summary.ok, report
    assert len(summary.failover_s) == cycles * kills_per_cycle, report
    stats = summary.stats
    for counter in ("acknowledged", "delivered", "audit_acked", "work_acked", "failover_probes"):
        assert stats[counter] > 0, f"{counter} is 0: the load did not do what it should\n{report}"
    # every message sent is delivered exactly once or cancelled (the exact final checks)
    assert stats["delivered"] + stats["final_cancelled"] == stats["messages"], report
    return summary, report
