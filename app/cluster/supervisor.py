"""The supervisor of a partitioned data dir's workers (``python -m app`` when P > 1).

It starts ROCKTIMER_WORKERS worker processes (app/cluster/worker.py), each owning the
partitions ``k % workers == index``, and does nothing else: it holds no socket and no
store. A worker that exits is started again at once (after a pause that doubles, up to
RESTART_PAUSE_MAX_S, while it keeps dying young); meanwhile the others serve their own
partitions and answer 503 + Retry-After for its. A worker that exits for a bad setting
stops them all (exit 2). SIGTERM or SIGINT stops every worker (each answers its long polls
and ends its streams at once), SIGKILL after STOP_TIMEOUT_S.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from types import FrameType

from app.__main__ import EXIT_BAD_SETTING, GRACEFUL_SHUTDOWN_S, fail
from app.cluster.layout import Layout
from app.cluster.worker import check_socket_paths
from app.config import Settings

POLL_S = 0.05  # how soon a dead worker is noticed
YOUNG_S = 2.0  # a worker that dies sooner than this after its start is crash-looping
RESTART_PAUSE_MIN_S = 0.1
RESTART_PAUSE_MAX_S = 2.0
STOP_TIMEOUT_S = GRACEFUL_SHUTDOWN_S + 1.0

log = logging.getLogger("rocktimer")


class Worker:
    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.pause = 0.0  # before the next start, while it dies young
        self.restart_at = 0.0

    def start(self) -> None:
        argv = [sys.executable, "-m", "app.cluster.worker", str(self.index)]
        self.proc = subprocess.Popen(argv)  # the same environment: the same settings
        self.started = time.monotonic()


def run(settings: Settings, layout: Layout) -> None:
    if settings.port == 0:
        fail(
            f"ROCKTIMER_WORKERS={layout.workers} serves one port from every worker: set "
            "ROCKTIMER_PORT to a port, not 0",
            EXIT_BAD_SETTING,
        )
    check_socket_paths(layout)
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    workers = [Worker(i) for i in range(layout.workers)]
    for worker in workers:
        worker.start()
    log.info(
        "%d workers, %d partitions, on %s:%d",
        layout.workers,
        layout.partitions,
        settings.host,
        settings.port,
    )
    code = 0
    while not stopping.wait(POLL_S):
        now = time.monotonic()
        for worker in workers:
            proc = worker.proc
            if proc is None:
                if now >= worker.restart_at:
                    worker.start()
                continue
            if (status := proc.poll()) is None:
                continue
            if status == EXIT_BAD_SETTING:
                log.error("worker %d exited for a bad setting: stopping", worker.index)
                code = EXIT_BAD_SETTING
                stopping.set()
                break
            young = now - worker.started < YOUNG_S
            worker.pause = min(max(worker.pause * 2, RESTART_PAUSE_MIN_S), RESTART_PAUSE_MAX_S)
            worker.pause = worker.pause if young else 0.0
            log.warning(
                "worker %d (pid %d) exited with %d: starting it again%s",
                worker.index,
                proc.pid,
                status,
                f" in {worker.pause:.1f} s" if worker.pause else "",
            )
            worker.proc, worker.restart_at = None, now + worker.pause
            if not worker.pause:
                worker.start()
    _stop_all(workers)
    if code:
        raise SystemExit(code)


def _stop_all(workers: list[Worker]) -> None:
    running = [w.proc for w in workers if w.proc is not None and w.proc.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for proc in running:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
