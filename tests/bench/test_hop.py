"""bench/hop.py at a tiny size, so the script cannot rot: it finds connections on worker 0,
sends both ways, and every send is a 201 (a relayed one included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import hop, process
from bench.client import run


@pytest.mark.slow
def test_hop_figure_runs(tmp_path: Path) -> None:
    env = {"ROCKTIMER_WORKERS": "2", "ROCKTIMER_PARTITIONS": "2"}
    with process.service(tmp_path, env) as srv:
        got = run(lambda: hop.measure(srv.port, srv.pid, rounds=2, sends=50))
    assert set(got) == {"direct", "forwarded"}
    for cpu_us, worker0_us, rate in got.values():  # CPU in clock ticks: no finer check
        assert cpu_us >= 0
        assert worker0_us >= 0
        assert rate > 0
