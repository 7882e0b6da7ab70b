"""The crash loop with two worker processes on two partitions (app/cluster/): each cycle
SIGKILLs one worker alone (the supervisor starts it again), then both workers
and the supervisor, under mixed load; nothing acknowledged is lost, each partition's
RocksDB opens without a repair."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path

import pytest

from tools import crash_loop

CYCLES = 3


@pytest.mark.slow
def test_nothing_acknowledged_is_lost_across_sigkills_of_two_workers(tmp_path: Path) -> None:
    seed = int(os.environ.get("CRASH_LOOP_SEED") or random.SystemRandom().randrange(2**32))
    out = io.StringIO()
    data = tmp_path / "data"
    config = crash_loop.Config(cycles=CYCLES, seed=seed, data_dir=data, workers=2)
    summary = crash_loop.run(config, out)
    report = f"{out.getvalue()}{summary.report()}"
    print(report)
    assert summary.ok, report
    assert len(summary.kills_at_s) == CYCLES
    assert max(summary.ready_s) <= crash_loop.READY_LIMIT_S
    assert (data / "partitions.json").exists()  # it ran partitioned: a store per partition
    assert sorted(p.name for p in data.glob("p[0-9]*")) == ["p0", "p1"]
    stats = summary.stats
    assert stats["worker_kills"] >= CYCLES - 1, report  # a cycle's timer may lose the race
    for counter in ("acknowledged", "delivered", "audit_acked", "work_acked", "work_nacked"):
        assert stats[counter] > 0, f"{counter} is 0: the load did not do what it should\n{report}"
    assert stats["delivered"] + stats["final_cancelled"] == stats["messages"], report
