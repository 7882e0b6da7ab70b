"""bench/pipeline.py's meter of a job's CPU: it finds processes started from any thread of
a process below the job (as a JVM starts its Python workers), not only its main thread's;
and its replay round of a bulk load's requests."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from bench import loader, pipeline
from tests.support import process

# A parent that starts, from a thread of its own, a child that spins 0.3 s of CPU and
# then sleeps until it is killed (the parent's stdin closing ends both).
PARENT = textwrap.dedent(
    """
    import subprocess, sys, threading
    child = (
        "import time\\nend = time.process_time() + 0.3\\n"
        "while time.process_time() < end: pass\\nprint('spun', flush=True)\\ntime.sleep(30)"
    )
    def start():
        p = subprocess.Popen([sys.executable, "-c", child], stdout=sys.stdout)
        sys.stdin.read()
        p.kill()
        p.wait()
    t = threading.Thread(target=start)
    t.start()
    t.join()
    """
)


@contextmanager
def spun(code: str) -> Iterator[int]:
    """``python -c code``, once it printed "spun": its PID; it ends when its stdin closes."""
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdin is not None
        try:
            assert proc.stdout.readline().strip() == "spun"
            yield proc.pid
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)


def test_the_job_meter_counts_a_child_started_from_another_thread() -> None:
    with spun(PARENT) as parent:
        found = pipeline.descendants(parent)
        assert len(found) == 2  # the parent and its thread's child
        meter = pipeline.JobCpu(parent)
        meter.stop()
    seconds = meter.seconds()
    assert seconds["other"] >= 0.25  # the child's spin, kept after it was sampled
    assert set(seconds) == {"driver", "other"}


def test_a_replay_round_sends_every_request_and_meters_the_server(tmp_path: Path) -> None:
    """The replay of a bulk load's requests (here loader.bulk_bodies', no Spark) into the
    server of a given tree: every message answered, msg/s and the server's CPU a message
    measured, and the servers started afterwards are this tree's again."""
    bodies = loader.bulk_bodies(3_000, seed=5, start_ms=loader.now_ms())
    root = process.ROOT
    with pipeline.server_of(tmp_path / "a" / ".."):  # the tree, resolved
        assert tmp_path.resolve() == process.ROOT
    assert root == process.ROOT
    with pipeline.server_of(root):
        rate, cpu_us = pipeline.replay_stats(tmp_path, bodies, "t")
    assert rate > 0
    assert cpu_us > 0
    assert (tmp_path / "replay-t").is_dir()


def test_jvm_threads_are_sorted_by_what_they_do() -> None:
    kinds = {
        name: pipeline.jvm_thread_kind(name)
        for name in (
            "C2 CompilerThre",
            "C1 CompilerThre",
            "GC Thread#0",
            "G1 Conc#0",
            "VM Thread",
            "Executor task l",
            "Thread-3",
            "java",
        )
    }
    assert kinds == {
        "C2 CompilerThre": "jit",
        "C1 CompilerThre": "jit",
        "GC Thread#0": "gc",
        "G1 Conc#0": "gc",
        "VM Thread": "gc",
        "Executor task l": "tasks",
        "Thread-3": "planning",
        "java": "planning",
    }


def test_thread_cpu_seconds_reads_each_thread_of_a_process() -> None:
    code = (
        "import sys, threading, time\n"
        "end = time.thread_time() + 0.3\n"
        "while time.thread_time() < end: pass\n"
        "t = threading.Thread(target=sys.stdin.read); t.start()\n"
        "print('spun', flush=True)\n"
        "t.join()\n"
    )
    with spun(code) as child:
        threads = pipeline.thread_cpu_seconds(child)
    assert len(threads) == 2  # the main thread and the one reading stdin
    assert threads[child][1] >= 0.25  # the main thread's spin


def test_stage_metrics_sums_each_stages_tasks(tmp_path: Path) -> None:
    """The event log's task ends, summed by stage and named by the stage's completion."""

    def task(stage: int, cpu_ns: int, gc_ms: int, written: int) -> dict[str, Any]:
        return {
            "Event": "SparkListenerTaskEnd",
            "Stage ID": stage,
            "Task Metrics": {
                "Executor Run Time": 2000,
                "Executor CPU Time": cpu_ns,
                "JVM GC Time": gc_ms,
                "Shuffle Write Metrics": {
                    "Shuffle Write Time": 0,
                    "Shuffle Bytes Written": written,
                },
                "Shuffle Read Metrics": {"Local Bytes Read": 3_000_000, "Remote Bytes Read": 0},
            },
        }

    events = [
        {"Event": "SparkListenerApplicationStart"},
        task(1, 1_500_000_000, 100, 4_000_000),
        task(1, 500_000_000, 300, 6_000_000),
        {"Event": "SparkListenerStageCompleted", "Stage Info": {"Stage ID": 1, "Stage Name": "a"}},
        task(3, 250_000_000, 0, 0),
    ]
    (tmp_path / "local-1").write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    got = pipeline.stage_metrics(tmp_path)
    assert [(s["stage"], s["name"], s["tasks"]) for s in got] == [(1, "a", 2), (3, "", 1)]
    assert (got[0]["cpu_s"], got[0]["gc_s"], got[0]["run_s"]) == (2.0, 0.4, 4.0)
    assert (got[0]["shuffle_written_mb"], got[0]["shuffle_read_mb"]) == (10.0, 6.0)
    assert got[1]["cpu_s"] == 0.25
