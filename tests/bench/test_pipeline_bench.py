"""bench/pipeline.py's meter of a job's CPU: it finds processes started from any thread of
a process below the job (as a JVM starts its Python workers), not only its main thread's;
and its replay round of a bulk load's requests."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

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


def test_the_job_meter_counts_a_child_started_from_another_thread() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as parent:
        assert parent.stdout is not None
        assert parent.stdin is not None
        try:
            assert parent.stdout.readline().strip() == "spun"
            found = pipeline.descendants(parent.pid)
            assert len(found) == 2  # the parent and its thread's child
            meter = pipeline.JobCpu(parent.pid)
            meter.stop()
        finally:
            parent.stdin.close()
            parent.wait(timeout=30)
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
