"""bench/hop.py and bench/workers.py at a tiny size, so the scripts cannot rot: hop finds
connections on worker 0 and sends both ways, every send a 201 (a relayed one included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import hop, workers
from bench.client import run
from tests.support import process


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


@pytest.mark.slow
def test_workers_figure_runs() -> None:
    """bench/workers.py at a tiny size: both servers store every message sent."""
    out = workers.compare(rounds=2, batches=1)
    for sent, seconds, cpu, *rates in out.values():
        assert sent == 2 * workers.TOPICS * 1_000
        assert seconds > 0
        assert cpu >= 0
        assert len(rates) == 2
