"""Figure 2: batch sends of 1000 messages a request, durable, in messages/s.

The service: ``POST /v1/topics/bench/messages/batch`` with 1000 small messages (one-hour
delay, so each becomes a timer plus its uniq-key index entry), from a few keep-alive
connections. The ceiling, in the same run and in this process: raw rocksdict, the same
number of synced WriteBatches of the same size and shape (per message a timer key with a
~200 B record and an index key with its 33 B entry), i.e. what RocksDB itself allows.

    python -m bench.batch
"""

from __future__ import annotations

import itertools
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import loader, rawdb, report, scale
from bench.client import run
from tests.support import process

TOPIC = "bench"
BODY = rawdb.BODY.decode()  # the ceiling's body: ~190 B stored timer values
DELAY_MS = 3_600_000  # 1 h: nothing falls due during the run
WARMUP_BATCHES = 5  # not counted: first RocksDB writes, first pydantic validations
RUN_TIMEOUT_S = 240.0  # a bound on the service run; at the target rate it takes seconds
TARGET_MSG_S = 150_000


# --- the figure ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchRun:
    stats: loader.LoadStats
    ceiling: float  # msg/s of raw synced WriteBatches
    cpu: str
    concurrency: int
    size: int


def run_figure(
    *, batches: int, concurrency: int = loader.BATCH_CONCURRENCY, size: int = loader.BATCH_SIZE
) -> list[report.Row]:
    return rows(measure(batches=batches, concurrency=concurrency, size=size))


def measure(
    *, batches: int, concurrency: int = loader.BATCH_CONCURRENCY, size: int = loader.BATCH_SIZE
) -> BatchRun:
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-batch-") as tmp:
        work = Path(tmp)
        ceiling = rawdb.write_ceiling(work / "ceiling", batches, size, DELAY_MS)
        stats, cpu = measure_service(work, batches=batches, concurrency=concurrency, size=size)
    return BatchRun(stats, ceiling, cpu, concurrency, size)


async def send(
    port: int,
    batches: int,
    *,
    concurrency: int = loader.BATCH_CONCURRENCY,
    size: int = loader.BATCH_SIZE,
) -> loader.LoadStats:
    """Figure 2's requests: ``batches`` batches of ``size`` of its messages to ``port``."""
    body = loader.batch_body([{"body": BODY, "delay_ms": DELAY_MS}] * size)
    return await loader.send_batches(
        process.HOST,
        port,
        TOPIC,
        itertools.repeat(body, batches),
        concurrency=concurrency,
        deadline_s=RUN_TIMEOUT_S,
    )


def measure_service(
    work: Path, *, batches: int, concurrency: int, size: int, env: dict[str, str] | None = None
) -> tuple[loader.LoadStats, str]:
    """The service's side of the figure on a fresh server under ``work`` (with ``env``
    settings): the load's stats and the server's CPU over it."""
    with process.service(work, env) as service:

        async def load(n: int) -> loader.LoadStats:
            return await send(service.port, n, concurrency=concurrency, size=size)

        run(lambda: load(WARMUP_BATCHES))
        with process.CpuMeter(service.pid) as cpu, process.Profile(service.pid, "batch"):
            stats = run(lambda: load(batches))
    return stats, cpu.describe()


def rows(run_: BatchRun) -> list[report.Row]:
    stats, ceiling, size, concurrency = run_.stats, run_.ceiling, run_.size, run_.concurrency
    ratio = stats.rate / ceiling
    failures = stats.describe_failures()
    return [
        report.Row(
            "2",
            f"batch send, {size}/request, durable, {concurrency} connections",
            f"{stats.rate:,.0f} msg/s",
            f"raw rocksdict synced WriteBatch {ceiling:,.0f} msg/s",
            f"{ratio:.2f}",
            f">= {TARGET_MSG_S:,} msg/s",
            stats.rate >= TARGET_MSG_S and not stats.failed,
            f"{stats.stored:,} msgs in {stats.seconds:.1f} s; {run_.cpu}"
            + (f"; failed {failures}" if failures else ""),
        )
    ]


def main() -> None:
    s = scale.current()
    print(report.table(run_figure(batches=s.batches), s.name))


if __name__ == "__main__":
    main()
