"""Figure 11: what the event log costs — figures 1, 2 and 4 with ``ROCKTIMER_EVENTS=false``
(the ceiling) and ``true`` (the default), in the same run.

Each measurement is the figure's own (send.py, batch.py, storm.py) on a fresh server; the
two settings run in the order off, on, on, off and each result is the mean of its two
runs, so a machine that gets slower (or faster) over the run favours neither. With the
event log on, every send also stages a ``scheduled`` event and every moved timer a
``delivered`` one, in the same WriteBatch, and the exporter seals them into Parquet every
second (``ROCKTIMER_EVENTS_SEAL_MS``, 10 s by default) during the measurement.

    python -m bench.events
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from bench import batch as batch_figure
from bench import loader, report, scale, send, storm
from bench.client import run
from tests.support import process

OFF = {"ROCKTIMER_EVENTS": "false"}
# A seal every second, not every 10 s (the default): the exporter's work falls inside
# every measured window, however short, and is counted in the cost.
ON = {"ROCKTIMER_EVENTS": "true", "ROCKTIMER_EVENTS_SEAL_MS": "1000"}
ORDER = (("off", OFF), ("on", ON), ("on", ON), ("off", OFF))
TARGET_SEND = 0.90  # issue 11: at most 10 % on the durable single and batch sends
TARGET_STORM = 0.95  # the storm path may lose at most 5 %


Order = tuple[tuple[str, dict[str, str]], ...]


def _mean_by_setting(
    measure: Callable[[Path, dict[str, str]], float], work: Path, order: Order
) -> dict[str, float]:
    got: dict[str, list[float]] = {"off": [], "on": []}
    for i, (name, env) in enumerate(order):
        where = work / f"{i}-{name}"
        where.mkdir(parents=True)
        got[name].append(measure(where, env))
    return {name: sum(v) / len(v) for name, v in got.items()}


def run_figure(
    *, warmup_s: float, seconds: float, batches: int, storm_n: int, order: Order = ORDER
) -> list[report.Row]:
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-events-") as tmp:
        work = Path(tmp)

        def single(where: Path, env: dict[str, str]) -> float:
            with process.service(where, env) as service:
                result = send.measure(
                    service, connections=send.CONNECTIONS, warmup_s=warmup_s, seconds=seconds
                )
            return result.rate if not result.errors else 0.0

        def batched(where: Path, env: dict[str, str]) -> float:
            stats, _ = batch_figure.measure_service(
                where,
                batches=batches,
                concurrency=loader.BATCH_CONCURRENCY,
                size=loader.BATCH_SIZE,
                env=env,
            )
            return stats.rate if not stats.failed else 0.0

        def stormed(where: Path, env: dict[str, str]) -> float:
            with process.service(where, env) as service:
                idle = process.status_kib(service.pid, "VmRSS")
                result = run(lambda: storm.drive(service.port, service.pid, storm_n, idle))
            complete = result.distinct_received == storm_n
            return storm_n / result.drain_s if complete and result.drain_s > 0 else 0.0

        sends = _mean_by_setting(single, work / "send", order)
        batches_ = _mean_by_setting(batched, work / "batch", order)
        storms = _mean_by_setting(stormed, work / "storm", order)
    runs = f"mean of {len(order) // 2} runs each, order {'/'.join(n for n, _ in order)}"
    return [
        _row("durable single send (fig. 1), req/s", sends, TARGET_SEND, f"{runs}; {seconds:g} s"),
        _row("batch send (fig. 2), msg/s", batches_, TARGET_SEND, f"{runs}; {batches} requests"),
        _row(f"storm of {storm_n:,} (fig. 4), drain timers/s", storms, TARGET_STORM, runs),
    ]


def _row(what: str, rates: dict[str, float], target: float, notes: str) -> report.Row:
    ratio = rates["on"] / rates["off"] if rates["off"] else 0.0
    return report.Row(
        "11",
        f"event log on: {what}",
        f"{rates['on']:,.0f}",
        f"event log off {rates['off']:,.0f}",
        f"{ratio:.2f}",
        f">= {target:.2f}",
        ratio >= target,
        notes,
    )


def main() -> None:
    s = scale.current()
    rows = run_figure(
        warmup_s=s.send_warmup_s, seconds=s.send_seconds, batches=s.batches, storm_n=s.storm_n
    )
    print(report.table(rows, s.name))


if __name__ == "__main__":
    main()
