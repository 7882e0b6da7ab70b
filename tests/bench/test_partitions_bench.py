"""bench/hop.py, bench/fdpass.py and bench/workers.py at a tiny size, so the scripts cannot
rot: hop finds connections on worker 0 and sends every way, every send a 201 (a relayed or
proxied one included); fdpass answers every request on a passed connection."""

from __future__ import annotations

import shutil
from contextlib import ExitStack
from pathlib import Path

import pytest

from bench import fdpass, hop, workers
from bench.client import run
from tests.support import process


@pytest.mark.slow
def test_hop_figure_runs(tmp_path: Path) -> None:
    env = {"ROCKTIMER_WORKERS": "2", "ROCKTIMER_PARTITIONS": "2"}
    with process.service(tmp_path, env) as srv:
        got = run(lambda: hop.measure(srv.port, srv.pid, rounds=2, sends=50, batches=2))
    assert [route.name for route in got] == ["direct", "passed", "hop"]
    for route in got:  # every request answered as expected, or measure raised
        assert route.single_n == 2 * 50
        assert route.batch_n == 2 * 2 * 1_000
        assert route.single_cpu >= 0  # clock ticks: no finer check
        assert route.batch_cpu >= 0


@pytest.mark.slow
@pytest.mark.skipif(
    not (shutil.which("haproxy") or shutil.which("nginx")),
    reason="neither haproxy nor nginx installed (apt-get install haproxy nginx)",
)
def test_hop_figure_routes_through_proxies(tmp_path: Path) -> None:
    """A proxy sends each topic to its owner's unix socket: every send a 201 (another
    worker's socket would answer 503: a request there is never relayed again)."""
    env = {"ROCKTIMER_WORKERS": "2", "ROCKTIMER_PARTITIONS": "2"}
    (tmp_path / "srv").mkdir()
    with process.service(tmp_path / "srv", env) as srv, ExitStack() as stack:
        data = process.data_dir(tmp_path / "srv")
        sockets = [str(data / f"w{i}.sock") for i in range(2)]
        owners = {hop.topic_of(k, 2): k for k in range(2)}
        fronts = [
            stack.enter_context(hop.proxy(n, tmp_path, sockets, owners))
            for n in ("haproxy", "nginx")
        ]
        proxies = [f for f in fronts if f is not None]
        got = run(lambda: hop.measure(srv.port, srv.pid, proxies, rounds=1, sends=20, batches=1))
    assert [route.name for route in got][3:] == [p.name for p in proxies]
    for route in got:
        assert route.single_n == 20
        assert route.batch_n == 1_000


@pytest.mark.slow
def test_fdpass_figure_runs() -> None:
    """Both ways answer every request: a passed connection keeps serving in its owner."""
    got = fdpass.measure(rounds=2, n=20)
    assert set(got) == {"accepted by the owner", "passed"}
    assert all(us >= 0 for us in got.values())


@pytest.mark.slow
def test_workers_figure_runs() -> None:
    """bench/workers.py at a tiny size: both servers store every message sent."""
    out = workers.compare(rounds=2, batches=1)
    for got in out.values():
        assert got.sent == 2 * workers.TOPICS * 1_000
        assert got.seconds > 0
        assert got.cpu_s >= 0
        assert got.pss_kib > 0
        assert len(got.rates) == 2
