"""Figure 16: the Spark pipeline on ``local[2]``, each job beside a ceiling of the same
minutes, in alternating rounds (the figures are medians).

- bulk load of N generated rows (Parquet, 8 topics, 1 % invalid) into a fresh server,
  rows/s end to end (JVM start included), beside the service's own batch send on a fresh
  server (figure 2's service side, ``python -m bench 2``: 1000 a request, 2 connections):
  what the loader could reach if Spark and Python cost nothing; target 0.8 x;
- report and audit over N events (a synthetic log, bench/events_data.py), seconds end to
  end, beside a Spark session plus one scan of every column of the same segments;
  targets 2 x and 3 x the scan.

    python -m bench 16                             # BENCH_PIPELINE_N, default 100 000
    BENCH_PIPELINE_N=1000000 python -m bench 16    # the bulk load's size
    python -m bench.pipeline load 1000000 3        # the bulk load alone: N, rounds
    python -m bench.pipeline load 1000000 3 2      # ... into ROCKTIMER_WORKERS=2
    python -m bench.pipeline report 1000000 3      # report and audit beside the scan
    python -m bench.pipeline trees ../a . 1000000 3  # the bulk load: a's loader, then this
    python -m bench.pipeline replay ../a . 200000 3  # the loader's requests: a's server, this
    python -m bench.pipeline stages 1000000        # one load: its CPU by thread and stage
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from bench import batch, events_data, loader, report, scale
from bench.client import run
from tests.support import process

MASTER = "local[2]"
TOPICS = 8
ROUNDS = 3  # alternating rounds of each side; the figures are their medians
TARGET_LOAD_RATIO = 0.8  # bulk load >= 0.8 x the service's own batch send
TARGET_REPORT_X = 2.0  # report <= 2 x a bare scan of the same files
TARGET_AUDIT_X = 3.0
JOB_TIMEOUT_S = 3_600.0  # one job at 10M rows takes minutes; this only stops a hang
CEILING_BATCHES = 200  # figure 2's quick size


def _job(*argv: str, tree: Path = process.ROOT, event_log: Path | None = None) -> dict[str, Any]:
    """``python -m <argv>`` from the code of ``tree`` (this one by default); its last
    stdout line (the summary), ``wall_s`` and ``cpu_s``: the CPU seconds of its processes
    by kind (``JobCpu``). With ``event_log``, Spark writes its event log there
    (``stage_metrics`` reads it)."""
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(tree)}  # the executors' Python imports it too
    if event_log is not None:
        env["PYSPARK_SUBMIT_ARGS"] = " ".join(
            [
                f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file://{event_log}",
                "--conf spark.eventLog.compress=false --conf spark.eventLog.rolling.enabled=false",
                "pyspark-shell",
            ]
        )
    with subprocess.Popen(
        [sys.executable, "-m", *argv, "--master", MASTER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tree,
        env=env,
    ) as job:
        cpu = JobCpu(job.pid)
        try:
            out, err = job.communicate(timeout=JOB_TIMEOUT_S)
        finally:
            cpu.stop()
            if job.poll() is None:
                job.kill()
    if job.returncode not in (0, 1):  # 1 is a finding (audit)
        raise RuntimeError(f"{argv[0]} exited {job.returncode}: {err[-2000:]}")
    summary: dict[str, Any] = orjson.loads(out.strip().splitlines()[-1])
    return {
        **summary,
        "wall_s": time.monotonic() - started,
        "cpu_s": cpu.seconds(),
        "jvm_threads_s": cpu.jvm_threads(),
    }


CPU_SAMPLE_S = 0.5  # a process's CPU is read this often (one that lives less is missed)


# The JVM's threads by what they do, from their names (/proc/<pid>/task/<tid>/comm: the
# first 15 characters of a Java thread's name); every other thread is ``planning``: the
# driver's own (py4j's, which plans and compiles each query), the scheduler's, the JVM's.
JVM_THREADS = (
    ("jit", ("C1 CompilerThre", "C2 CompilerThre")),
    ("gc", ("GC Thread", "G1 ", "VM Thread")),
    ("tasks", ("Executor task",)),
)


def jvm_thread_kind(name: str) -> str:
    """What a JVM thread named ``name`` does (``JVM_THREADS``)."""
    for kind, prefixes in JVM_THREADS:
        if name.startswith(prefixes):
            return kind
    return "planning"


def thread_cpu_seconds(pid: int) -> dict[int, tuple[str, float]]:
    """Each live thread of ``pid``: its name and CPU seconds so far (10 ms ticks)."""
    out: dict[int, tuple[str, float]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        out[int(task.name)] = (name, ticks / os.sysconf("SC_CLK_TCK"))
    return out


class JobCpu:
    """CPU seconds of a job's processes by kind — ``driver`` (the job's Python), ``jvm``
    (Spark), ``python workers`` (the executors' Python) — sampled from /proc while it
    runs: the last reading of each process counts, so a worker that exits is kept. The
    JVM's seconds also by thread (``jvm_threads``): compiling (JIT), collecting garbage,
    running tasks, and the rest (planning)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._last: dict[int, tuple[str, float]] = {}
        self._threads: dict[tuple[int, int], tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-cpu", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(CPU_SAMPLE_S):
                return

    def _sample(self) -> None:
        for pid in descendants(self.pid):
            try:
                seconds = process.cpu_seconds(pid)
                kind = _kind(pid, self.pid)
            except (FileNotFoundError, ProcessLookupError):
                continue
            self._last[pid] = (kind, seconds)
            if kind == "jvm":
                try:
                    threads = thread_cpu_seconds(pid)
                except (FileNotFoundError, ProcessLookupError):
                    continue
                for tid, (name, spent) in threads.items():
                    self._threads[pid, tid] = (jvm_thread_kind(name), spent)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def seconds(self) -> dict[str, float]:
        return _sums(self._last.values())

    def jvm_threads(self) -> dict[str, float]:
        """The JVM's CPU seconds by ``JVM_THREADS`` kind (a thread that ended between two
        samples keeps its last reading)."""
        return _sums(self._threads.values())


def _sums(readings: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for kind, seconds in readings:
        out[kind] = out.get(kind, 0.0) + seconds
    return {kind: round(seconds, 1) for kind, seconds in out.items()}


def _kind(pid: int, root: int) -> str:
    if pid == root:
        return "driver"
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if argv and argv[0].endswith(b"java"):
        return "jvm"
    return "python workers" if b"pyspark.daemon" in argv else "other"


def descendants(root: int) -> list[int]:
    """``root`` and every process below it, whichever thread started them (a JVM starts
    its Python workers from a thread of its own: /proc's per-thread children miss them)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            parent[int(entry.name)] = int(stat[1])
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, ppid in parent.items() if ppid in frontier]
        found += frontier
    return found


def scan_seconds(events: str) -> float:
    """The report's floor, end to end like the jobs (a process of its own, JVM start
    included): a session plus one pass over every column of the segments."""
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "bench.pipeline", "scan", events, MASTER],
        check=True,
        capture_output=True,
        timeout=JOB_TIMEOUT_S,
        cwd=process.ROOT,
    )
    return time.monotonic() - started


def scan(events: str, master: str) -> None:
    from pyspark.sql import functions as F

    from pipeline import cli
    from pipeline.events import read_events

    spark = cli.session(master, "bench-scan")
    df = read_events(spark, events)
    df.agg(F.max(F.xxhash64(*df.columns))).collect()  # max: a sum would overflow (ANSI)
    spark.stop()


def server_env(workers: int) -> dict[str, str] | None:
    """The server's settings for ``workers`` worker processes (one partition each)."""
    return None if workers == 1 else {"ROCKTIMER_WORKERS": str(workers)}


def load_round(
    work: Path,
    rows: str,
    r: int | str,
    workers: int = 1,
    tree: Path = process.ROOT,
    event_log: Path | None = None,
) -> tuple[dict[str, Any], str]:
    """One bulk load of ``rows`` into a fresh server (this tree's), the loader's code from
    ``tree``: the job's summary and the server's CPU (its workers' with it)."""
    (work / f"load-{r}").mkdir()
    with (
        process.service(work / f"load-{r}", server_env(workers)) as service,
        process.CpuMeter(service.pid, tree=True) as cpu,
    ):
        load = _job(
            "pipeline.bulk_load",
            "--input",
            rows,
            "--format",
            "parquet",
            "--rejects",
            str(work / f"rejects-{r}"),
            "--url",
            f"http://{process.HOST}:{service.port}",
            tree=tree,
            event_log=event_log,
        )
    return load, cpu.describe()


def stage_metrics(event_log: Path) -> list[dict[str, Any]]:
    """Per stage of the job whose event log is in the folder ``event_log`` (one
    application): its name, tasks, and the tasks' summed seconds (run, executor CPU, JVM
    GC, shuffle write) and megabytes (shuffle written and read, spilled to disk)."""
    stages: dict[int, dict[str, Any]] = {}
    for path in sorted(event_log.glob("*")):
        with path.open() as f:
            for line in f:
                event = orjson.loads(line)
                kind = event["Event"]
                if kind == "SparkListenerStageCompleted":
                    info = event["Stage Info"]
                    stage = stages.setdefault(info["Stage ID"], _stage())
                    stage["name"] = info["Stage Name"]
                elif kind == "SparkListenerTaskEnd":
                    stage = stages.setdefault(event["Stage ID"], _stage())
                    m = event.get("Task Metrics") or {}
                    written = m.get("Shuffle Write Metrics") or {}
                    read = m.get("Shuffle Read Metrics") or {}
                    stage["tasks"] += 1
                    stage["run_s"] += m.get("Executor Run Time", 0) / 1e3
                    stage["cpu_s"] += m.get("Executor CPU Time", 0) / 1e9
                    stage["gc_s"] += m.get("JVM GC Time", 0) / 1e3
                    stage["shuffle_write_s"] += written.get("Shuffle Write Time", 0) / 1e9
                    stage["shuffle_written_mb"] += written.get("Shuffle Bytes Written", 0) / 1e6
                    stage["shuffle_read_mb"] += (
                        read.get("Local Bytes Read", 0) + read.get("Remote Bytes Read", 0)
                    ) / 1e6
                    stage["spilled_mb"] += m.get("Disk Bytes Spilled", 0) / 1e6
    return [
        {"stage": k, **{name: round(v, 2) if isinstance(v, float) else v for name, v in s.items()}}
        for k, s in sorted(stages.items())
    ]


def _stage() -> dict[str, Any]:
    names = ("run_s", "cpu_s", "gc_s", "shuffle_write_s", "shuffle_written_mb")
    return {
        "name": "",
        "tasks": 0,
        **dict.fromkeys((*names, "shuffle_read_mb", "spilled_mb"), 0.0),
    }


def measure_stages(n: int, work: Path) -> dict[str, Any]:
    """One bulk load of N generated rows with Spark's event log: the job's CPU by process
    and by JVM thread, and its stages' task metrics."""
    rows = generate_rows(n, work)
    (work / "events").mkdir()
    load, server = load_round(work, rows, "stages", event_log=work / "events")
    return {
        "load": load,
        "server": server,
        "stages": stage_metrics(work / "events"),
    }


def ceiling_round(work: Path, r: int | str, workers: int = 1) -> float:
    """Figure 2's service side (``python -m bench 2``) on a fresh server: msg/s. With
    workers, the batch send of ``bench.workers`` (a connection per topic, the topics over
    the partitions), so every worker has its share."""
    (work / f"ceiling-{r}").mkdir()
    if workers == 1:
        stats, _cpu = batch.measure_service(
            work / f"ceiling-{r}",
            batches=CEILING_BATCHES,
            concurrency=loader.BATCH_CONCURRENCY,
            size=loader.BATCH_SIZE,
        )
        return stats.rate
    from bench import workers as workers_bench

    names = workers_bench.topics()
    with process.service(work / f"ceiling-{r}", server_env(workers)) as service:
        run(lambda: workers_bench.window(service.port, names, 2))
        sent, seconds = run(
            lambda: workers_bench.window(service.port, names, CEILING_BATCHES // len(names))
        )
    return sent / seconds


def replay_bodies(rows: str) -> dict[str, list[bytes]]:
    """The requests the loader sends for ``rows``, built here once before any timing (the
    service's checks and ids, batches of 1000 per topic): what the service is sent,
    without Spark. Their messages carry ids, tags, properties and varied deliver times,
    which figure 2's identical id-less messages do not."""
    import pyarrow.parquet as pq

    from app.config import Settings
    from app.defaults import MAX_BATCH
    from pipeline.rows import Message, to_message

    settings, now = Settings(), loader.now_ms()
    pending: dict[str, list[dict[str, Any]]] = {}
    bodies: dict[str, list[bytes]] = {}
    for chunk in pq.read_table(rows).to_batches(50_000):
        for row in chunk.to_pylist():
            if isinstance(row.get("properties"), list):  # a map column reads as pairs
                row["properties"] = dict(row["properties"])
            message = to_message(row, now, settings)
            if not isinstance(message, Message):
                continue
            items = pending.setdefault(message.topic, [])
            items.append(message.item)
            if len(items) == MAX_BATCH:
                bodies.setdefault(message.topic, []).append(loader.batch_body(items))
                pending[message.topic] = []
    for topic, items in pending.items():
        if items:
            bodies.setdefault(topic, []).append(loader.batch_body(items))
    return bodies


REPLAY_IN_FLIGHT = 8  # requests on their way at once, as the loader's 2 tasks x 4


def replay_round(work: Path, bodies: dict[str, list[bytes]], r: int, workers: int = 1) -> float:
    """The loader's requests, pre-built, sent to a fresh server from one connection a topic
    (8 topics: 8 in flight): messages stored a second."""
    return replay_stats(work, bodies, r, workers)[0]


def replay_stats(
    work: Path, bodies: dict[str, list[bytes]], r: int | str, workers: int = 1
) -> tuple[float, float]:
    """``replay_round``'s msg/s and the server's CPU a message (µs, its workers' with it)."""
    (work / f"replay-{r}").mkdir()
    with process.service(work / f"replay-{r}", server_env(workers)) as service:
        with process.CpuMeter(service.pid, tree=True) as cpu:
            done = run(
                lambda: loader.send_topics(
                    process.HOST, service.port, bodies, deadline_s=JOB_TIMEOUT_S
                )
            )
        sent = sum(s.stored + sum(s.failed.values()) for s in done)
    return sent / cpu.wall_s, cpu.server_s / sent * 1e6 if sent else 0.0


@contextlib.contextmanager
def server_of(tree: Path) -> Iterator[None]:
    """The servers started meanwhile run ``tree``'s code (``python -m app`` from there)."""
    root, process.ROOT = process.ROOT, tree.resolve()
    try:
        yield
    finally:
        process.ROOT = root


def measure_replay_trees(trees: list[Path], n: int, rounds: int, work: Path) -> dict[str, Any]:
    """The loader's requests for the same N rows (built once, before the rounds, so they age
    through the run as a load's rows do), replayed into fresh servers of each tree beside
    that tree's batch send (figure 2's service side), in rounds alternating the trees and
    the two steps: each tree's msg/s of both, the replay's server CPU a message, the
    replay ÷ the batch send round by round, and B's replay ÷ A's."""
    rows = generate_rows(n, work)
    bodies = replay_bodies(rows)
    out: dict[str, Any] = {}
    load_before = os.getloadavg()
    for r in range(rounds):
        for k, tree in enumerate(trees if r % 2 == 0 else trees[::-1]):
            side = out.setdefault(
                str(tree), {"ceilings": [], "replays": [], "replay_cpu_us": [], "ratios": []}
            )
            with server_of(tree):
                steps = ["ceiling", "replay"] if (r + k) % 2 == 0 else ["replay", "ceiling"]
                for step in steps:
                    if step == "ceiling":
                        side["ceilings"].append(round(ceiling_round(work, f"{r}-{k}")))
                    else:
                        rate, cpu_us = replay_stats(work, bodies, f"{r}-{k}")
                        side["replays"].append(round(rate))
                        side["replay_cpu_us"].append(round(cpu_us, 2))
            side["ratios"].append(round(side["replays"][-1] / side["ceilings"][-1], 3))
    first, second = (out[str(t)] for t in trees)
    out["replay_b_over_a"] = [
        round(b / a, 3) for a, b in zip(first["replays"], second["replays"], strict=True)
    ]
    out["replay_cpu_b_over_a"] = [
        round(b / a, 3)
        for a, b in zip(first["replay_cpu_us"], second["replay_cpu_us"], strict=True)
    ]
    out["load_average"] = [round(x, 1) for x in (*load_before, *os.getloadavg())]
    return out


def measure_load(n: int, rounds: int, work: Path, workers: int = 1) -> dict[str, Any]:
    """Bulk load of an N-row, 8-topic file beside the server's batch-send ceiling, in
    alternating rounds (load, ceiling, ceiling, load, …) so both see the same minutes."""
    rows = generate_rows(n, work)
    bodies = replay_bodies(rows)
    loads: list[dict[str, Any]] = []
    ceilings: list[float] = []
    replays: list[float] = []
    cpus: list[str] = []
    load_before = os.getloadavg()
    for r in range(rounds):  # load, ceiling, replay; then ceiling, replay, load; …
        steps = ["load", "ceiling", "replay"]
        for what in steps[r % 3 :] + steps[: r % 3]:
            if what == "load":
                load, cpu = load_round(work, rows, r, workers)
                loads.append(load)
                cpus.append(cpu)
            elif what == "ceiling":
                ceilings.append(ceiling_round(work, r, workers))
            else:
                replays.append(replay_round(work, bodies, r, workers))
    rates = [load["rows"] / load["wall_s"] for load in loads]
    return {
        "loads": loads,
        "rates": rates,
        "ceilings": ceilings,
        "replays": replays,
        "cpus": cpus,
        "job_cpu_s": [load["cpu_s"] for load in loads],
        "load_average": [round(x, 1) for x in (*load_before, *os.getloadavg())],
    }


def generate_rows(n: int, work: Path) -> str:
    """The bulk load's input: N rows over ``TOPICS`` topics, Parquet."""
    rows = str(work / "rows")
    _job(
        "pipeline.generate",
        "--rows",
        str(n),
        "--out",
        rows,
        "--format",
        "parquet",
        "--topics",
        str(TOPICS),
    )
    return rows


def measure_trees(trees: list[Path], n: int, rounds: int, work: Path) -> dict[str, Any]:
    """The bulk load of the same N rows with the loader of each tree (a worktree of
    another build: its ``pipeline/``; the server is this tree's), into fresh servers, the
    trees' order alternating each round: rows/s, the job's CPU by process, the server's."""
    rows = generate_rows(n, work)
    out: dict[str, Any] = {
        str(t): {"rates": [], "job_cpu_s": [], "jvm_threads_s": [], "server": []} for t in trees
    }
    load_before = os.getloadavg()
    for r in range(rounds):
        for k, tree in enumerate(trees if r % 2 == 0 else trees[::-1]):
            load, cpu = load_round(work, rows, f"{r}-{k}", tree=tree)
            side = out[str(tree)]
            side["rates"].append(round(load["rows"] / load["wall_s"]))
            side["job_cpu_s"].append(load["cpu_s"])
            side["jvm_threads_s"].append(load["jvm_threads_s"])
            side["server"].append(cpu)
            side["counts"] = [load[kind] for kind in ("loaded", "already_present", "rejected")]
    first, second = (out[str(t)]["rates"] for t in trees)
    out["ratios"] = [round(b / a, 3) for a, b in zip(first, second, strict=True)]
    out["load_average"] = [round(x, 1) for x in (*load_before, *os.getloadavg())]
    return out


def measure_scan(n: int, rounds: int, work: Path) -> dict[str, Any]:
    """Report and audit over an N-event log beside a bare scan of it, rotating the order
    of the three each round so each sees the same minutes."""
    events = str(work / "events")
    events_data.write(Path(events), n)
    scans: list[float] = []
    reports: list[dict[str, Any]] = []
    audits: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    for r in range(rounds):  # scan, report, audit; then report, audit, scan; …
        steps = ["scan", "report", "audit"]
        for step in steps[r % 3 :] + steps[: r % 3]:
            if step == "scan":
                scans.append(scan_seconds(events))
            elif step == "report":
                out = str(work / f"report-{r}")
                reports.append(_job("pipeline.report", "--events", events, "--out", out))
            else:
                audits.append(_job("pipeline.audit", "--events", events))
    return {
        "scans": scans,
        "reports": reports,
        "audits": audits,
        "scan_load_average": [round(x, 1) for x in (*load_before, *os.getloadavg())],
    }


def measure(n: int, rounds: int = ROUNDS) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-pipeline-") as tmp:
        work = Path(tmp)
        return {"n": n, **measure_load(n, rounds, work), **measure_scan(n, rounds, work)}


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def rows(m: dict[str, Any]) -> list[report.Row]:
    n = m["n"]
    rate, ceiling = _median(m["rates"]), _median(m["ceilings"])
    scan = _median(m["scans"])
    rep = _median([r["wall_s"] for r in m["reports"]])
    aud = _median([a["wall_s"] for a in m["audits"]])
    last_load, last_report, last_audit = m["loads"][-1], m["reports"][-1], m["audits"][-1]

    def each(xs: list[float], unit: str) -> str:
        return " / ".join(f"{x:,.0f}" if unit == "/s" else f"{x:.1f}" for x in xs) + (
            " rows/s" if unit == "/s" else " s"
        )

    return [
        report.Row(
            "16",
            f"bulk load of {n:,} rows, {TOPICS} topics, {MASTER}, end to end",
            f"{rate:,.0f} rows/s",
            f"batch send (figure 2's service side) {ceiling:,.0f} msg/s",
            report.ratio(rate, ceiling),
            f">= {TARGET_LOAD_RATIO} x the batch send",
            rate >= TARGET_LOAD_RATIO * ceiling,
            f"medians of {len(m['rates'])} alternating rounds; loads {each(m['rates'], '/s')}, "
            f"batch sends {' / '.join(f'{c:,.0f}' for c in m['ceilings'])} msg/s; "
            f"the loader's requests without Spark {_median(m.get('replays', [])):,.0f} msg/s "
            f"({report.ratio(rate, _median(m.get('replays', [])))}); "
            f"loaded {last_load['loaded']:,}, rejected {last_load['rejected']:,}; "
            f"{m['cpus'][-1]}; the job's CPU s {m['job_cpu_s'][-1]}",
        ),
        report.Row(
            "16",
            f"report over {last_report['events']:,} events, {MASTER}",
            f"{rep:.1f} s",
            f"Spark scan of every column {scan:.1f} s",
            report.ratio(scan, rep),
            f"<= {TARGET_REPORT_X} x the scan",
            rep <= TARGET_REPORT_X * scan,
            f"reports {each([r['wall_s'] for r in m['reports']], 's')}, scans "
            f"{each(m['scans'], 's')}; {last_report['topics']} topics",
        ),
        report.Row(
            "16",
            f"audit over {last_report['events']:,} events, {MASTER}",
            f"{aud:.1f} s",
            f"Spark scan of every column {scan:.1f} s",
            report.ratio(scan, aud),
            f"<= {TARGET_AUDIT_X} x the scan",
            aud <= TARGET_AUDIT_X * scan,
            f"audits {each([a['wall_s'] for a in m['audits']], 's')}; "
            f"{last_audit['messages']:,} messages, {last_audit['findings']:,} findings",
        ),
    ]


def run_figure(n: int) -> list[report.Row]:
    return rows(measure(n))


def main() -> None:
    if sys.argv[1:2] == ["scan"]:
        scan(sys.argv[2], sys.argv[3])
        return
    # replay A B N ROUNDS: the same requests into A's server, then B's
    # trees A B N ROUNDS: the loader of A against B's
    two_trees = {"replay": measure_replay_trees, "trees": measure_trees}
    if sys.argv[1:2] and sys.argv[1] in two_trees:
        n, rounds = int(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else ROUNDS
        trees = [Path(t).resolve() for t in sys.argv[2:4]]
        with tempfile.TemporaryDirectory(prefix="rocktimer-bench-pipeline-") as tmp:
            m = two_trees[sys.argv[1]](trees, n, rounds, Path(tmp))
        for key, value in m.items():
            print(key, orjson.dumps(value).decode())
        return
    if sys.argv[1:2] == ["stages"]:  # stages N: one load, where its JVM's CPU went
        with tempfile.TemporaryDirectory(prefix="rocktimer-bench-pipeline-") as tmp:
            m = measure_stages(int(sys.argv[2]), Path(tmp))
        for key, value in m.items():
            print(key, orjson.dumps(value).decode())
        return
    if sys.argv[1:2] in (["load"], ["report"]):
        n, rounds = int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else ROUNDS
        with tempfile.TemporaryDirectory(prefix="rocktimer-bench-pipeline-") as tmp:
            if sys.argv[1] == "load":  # a fourth argument: the server's worker processes
                workers = int(sys.argv[4]) if len(sys.argv) > 4 else 1
                m = measure_load(n, rounds, Path(tmp), workers)
            else:
                m = measure_scan(n, rounds, Path(tmp))
        for key, value in m.items():
            print(key, orjson.dumps(value).decode())
        return
    s = scale.current()
    print(report.table(run_figure(s.pipeline_n), s.name))


if __name__ == "__main__":
    main()
