"""Figure 16: the Spark pipeline on ``local[2]``, each job beside a ceiling of the same run.

- bulk load of N generated rows (Parquet, 1 % invalid) into a running service, rows/s end
  to end (JVM start included), beside the service's own batch-send rate measured right
  after on the same server (1000 a request, figure 2's client): what the loader could
  reach if Spark and Python cost nothing;
- report and audit over N events (a synthetic log, bench/events_data.py), seconds end to
  end, beside a plain Spark scan of every column of the same segments.

    python -m bench 16                        # BENCH_PIPELINE_N, default 100 000
    BENCH_PIPELINE_N=10000000 python -m bench 16   # the targets' size (minutes)
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench import events_data, loader, report, scale
from bench.client import run
from tests.support import process

MASTER = "local[2]"
TARGET_ROWS_S = 100_000
TARGET_REPORT_S = 60.0
TARGET_AUDIT_S = 90.0
JOB_TIMEOUT_S = 3_600.0  # one job at 10M rows takes minutes; this only stops a hang
CEILING_BATCHES = 200  # figure 2's quick size
TOPIC = "bench-ceiling"


def _job(*argv: str) -> dict[str, Any]:
    """``python -m <argv>``; its last stdout line (the summary) plus ``wall_s``."""
    started = time.monotonic()
    done = subprocess.run(  # noqa: PLW1510 (the exit code is checked below: 1 is a finding)
        [sys.executable, "-m", *argv, "--master", MASTER],
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
        cwd=process.ROOT,
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{argv[0]} exited {done.returncode}: {done.stderr[-2000:]}")
    summary: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return {**summary, "wall_s": time.monotonic() - started}


def scan_seconds(events: str) -> float:
    """The report's floor: a session plus one pass over every column of the segments."""
    from pyspark.sql import functions as F

    from pipeline import cli
    from pipeline.events import read_events

    started = time.monotonic()
    spark = cli.session(MASTER, "bench-scan")
    df = read_events(spark, events)
    df.agg(F.max(F.xxhash64(*df.columns))).collect()  # max: a sum would overflow (ANSI)
    seconds = time.monotonic() - started
    spark.stop()
    return seconds


def measure(n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-pipeline-") as tmp:
        work = Path(tmp)
        rows, events = str(work / "rows"), str(work / "events")
        _job("pipeline.generate", "--rows", str(n), "--out", rows, "--format", "parquet")
        with process.service(work) as service:
            url = f"http://{process.HOST}:{service.port}"
            with process.CpuMeter(service.pid) as cpu:
                load = _job(
                    "pipeline.bulk_load",
                    "--input",
                    rows,
                    "--format",
                    "parquet",
                    "--rejects",
                    str(work / "rejects"),
                    "--url",
                    url,
                )
            body = loader.batch_body([{"body": "x" * 60, "delay_ms": 3_600_000}] * 1000)

            async def ceiling() -> loader.LoadStats:
                return await loader.send_batches(
                    process.HOST,
                    service.port,
                    TOPIC,
                    itertools.repeat(body, CEILING_BATCHES),
                    concurrency=loader.BATCH_CONCURRENCY,
                    deadline_s=JOB_TIMEOUT_S,
                )

            batch = run(ceiling)
        events_data.write(Path(events), n)
        scan_s = scan_seconds(events)
        rep = _job("pipeline.report", "--events", events, "--out", str(work / "report"))
        audit = _job("pipeline.audit", "--events", events)
    return {
        "n": n,
        "load": load,
        "server_cpu": cpu.describe(),
        "batch_rate": batch.rate,
        "scan_s": scan_s,
        "report": rep,
        "audit": audit,
    }


def rows(m: dict[str, Any]) -> list[report.Row]:
    load, rep, audit, n = m["load"], m["report"], m["audit"], m["n"]
    rate = load["rows"] / load["wall_s"]
    return [
        report.Row(
            "16",
            f"bulk load of {n:,} rows, {MASTER}, end to end",
            f"{rate:,.0f} rows/s",
            f"batch send on the same server {m['batch_rate']:,.0f} msg/s",
            report.ratio(rate, m["batch_rate"]),
            f">= {TARGET_ROWS_S:,} rows/s",
            rate >= TARGET_ROWS_S,
            f"loaded {load['loaded']:,}, already {load['already_present']:,}, rejected "
            f"{load['rejected']:,}; {load['wall_s']:.0f} s; {m['server_cpu']}",
        ),
        report.Row(
            "16",
            f"report over {rep['events']:,} events, {MASTER}",
            f"{rep['wall_s']:.1f} s",
            f"Spark scan of every column {m['scan_s']:.1f} s",
            report.ratio(m["scan_s"], rep["wall_s"]),
            f"< {TARGET_REPORT_S:.0f} s",
            rep["wall_s"] < TARGET_REPORT_S,
            f"{rep['topics']} topics, {rep['delivered']:,} delivered",
        ),
        report.Row(
            "16",
            f"audit over {rep['events']:,} events, {MASTER}",
            f"{audit['wall_s']:.1f} s",
            f"Spark scan of every column {m['scan_s']:.1f} s",
            report.ratio(m["scan_s"], audit["wall_s"]),
            f"< {TARGET_AUDIT_S:.0f} s",
            audit["wall_s"] < TARGET_AUDIT_S,
            f"{audit['messages']:,} messages, {audit['findings']:,} findings",
        ),
    ]


def run_figure(n: int) -> list[report.Row]:
    return rows(measure(n))


def main() -> None:
    s = scale.current()
    print(report.table(run_figure(s.pipeline_n), s.name))


if __name__ == "__main__":
    main()
