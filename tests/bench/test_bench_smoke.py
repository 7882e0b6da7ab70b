"""Tiny runs of every bench figure, so the scripts cannot rot between `make bench` runs.

Each starts the real service (and the bare app) as a child process, as the bench does,
at a size that takes a few seconds; the numbers are not checked, only that each figure
runs to the end, counts what it sent, and renders its rows.
"""

from __future__ import annotations

import pytest

from bench import batch, lateness, report, scale, send, storm
from bench.stats import percentile, spread


def rendered(rows: list[report.Row]) -> str:
    text = report.table(rows, "smoke")
    assert text.count("\n|") == len(rows) + 2  # header, rule, one line per row
    return text


@pytest.mark.slow
def test_send_figure_runs() -> None:
    rows = send.run_figure(connections=4, warmup_s=0.2, seconds=0.5)
    assert [r.number for r in rows] == ["1", "1"]
    assert "req/s" in rows[0].result
    assert "errors" not in rows[0].notes
    rendered(rows)


@pytest.mark.slow
def test_batch_figure_runs() -> None:
    rows = batch.run_figure(batches=3, size=100)
    assert "300 msgs" in rows[0].notes
    assert "failed" not in rows[0].notes
    rendered(rows)


@pytest.mark.slow
def test_lateness_figure_runs() -> None:
    rows = lateness.run_figure(seconds=1, rate=300)
    assert len(rows) == 2
    assert all(r.notes.startswith("300/300 received") for r in rows)
    rendered(rows)


@pytest.mark.slow
def test_storm_figure_runs() -> None:
    rows = storm.run_figure(n=1_500)
    drain, memory, delivered = rows
    assert "timers/s" in drain.result
    assert "MiB" in memory.result
    assert delivered.result == "1,500 distinct msg_ids"
    assert delivered.met is True
    rendered(rows)


def test_scale_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_SCALE", raising=False)
    monkeypatch.delenv("BENCH_STORM_N", raising=False)
    assert scale.current() == scale.QUICK
    monkeypatch.setenv("BENCH_SCALE", "full")
    assert scale.current().storm_n == 1_000_000
    monkeypatch.setenv("BENCH_STORM_N", "5000")
    assert scale.current().storm_n == 5_000
    monkeypatch.setenv("BENCH_SCALE", "huge")
    with pytest.raises(SystemExit):
        scale.current()


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    s = spread(list(reversed(values)))
    assert (s.p50, s.p99, s.max, s.n) == (50, 99, 100, 100)
    assert spread([]).ms() == "no samples"
