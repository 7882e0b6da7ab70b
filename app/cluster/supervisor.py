"""The supervisor of a partitioned data dir's workers (``python -m app`` when P > 1).

It forks ROCKTIMER_WORKERS worker processes (app/cluster/worker.py), each owning the
partitions ``k % workers == index``, and does nothing else: it holds no socket, no store
and no thread. A worker that exits is started again at once (after a pause that doubles, up to
RESTART_PAUSE_MAX_S, while it keeps dying young); meanwhile the others serve their own
partitions and answer 503 + Retry-After for its. A worker that exits for a bad setting
stops them all (exit 2). SIGTERM or SIGINT stops every worker (each answers its long polls
and ends its streams at once), SIGKILL after STOP_TIMEOUT_S.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import sys
import threading
import time
import traceback
from types import FrameType

from app.__main__ import EXIT_BAD_SETTING, EXIT_CANNOT_START, GRACEFUL_SHUTDOWN_S, fail
from app.cluster import worker
from app.cluster.layout import Layout, keep
from app.cluster.worker import check_socket_paths, die_with_parent, public_socket
from app.config import Settings

POLL_S = 0.05  # how soon a dead worker is noticed
YOUNG_S = 2.0  # a worker that dies sooner than this after its start is crash-looping
RESTART_PAUSE_MIN_S = 0.1
RESTART_PAUSE_MAX_S = 2.0
STOP_TIMEOUT_S = GRACEFUL_SHUTDOWN_S + 1.0

log = logging.getLogger("rocktimer")


class Worker:
    """One worker process: forked from the supervisor, which has already imported what a
    worker runs and holds no thread, socket or store; a restart skips the interpreter's
    start and the imports (most of a start), and the imported pages stay shared."""

    def __init__(self, index: int, settings: Settings, layout: Layout) -> None:
        self.index = index
        self.settings = settings
        self.layout = layout
        self.pid = 0  # 0: not running
        self.started = 0.0
        self.pause = 0.0  # before the next start, while it dies young
        self.restart_at = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        pid = os.fork()
        if pid:
            self.pid = pid
            return
        code = 1
        try:
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, signal.SIG_DFL)  # uvicorn sets its own
            die_with_parent()
            worker.run(self.settings, self.layout, self.index)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def exit_code(self) -> int | None:
        """Its exit code (-signal if killed) once it has exited, else None."""
        done, status = os.waitpid(self.pid, os.WNOHANG)
        return os.waitstatus_to_exitcode(status) if done else None

    def wait(self, deadline: float) -> None:
        """Until it has exited; SIGKILL at ``deadline``."""
        while time.monotonic() < deadline:
            if self.exit_code() is not None:
                return
            time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def run(settings: Settings, layout: Layout, note: str = "") -> None:
    """Serve ``layout`` until SIGTERM; ``note``: a line to log once the start is sure
    (app/cluster/layout.py's reason for fewer workers than cores)."""
    if settings.port == 0:
        fail(
            f"the data dir {layout.data_dir} has {layout.partitions} partitions, served by "
            "worker processes that share one port: set ROCKTIMER_PORT to a port, not 0",
            EXIT_BAD_SETTING,
        )
    check_socket_paths(layout)
    # A port another process holds is one line and exit 1 before anything is written (the
    # workers' SO_REUSEPORT binds would fail one by one, each restarted); a former
    # worker of this data dir, still stopping, shares it.
    public_socket(settings, backlog=0).close()
    try:
        keep(layout)
    except OSError as exc:
        fail(f"cannot use the data dir {layout.data_dir}: {exc.strerror or exc}", EXIT_CANNOT_START)
    if note:
        log.info(note)
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    workers = [Worker(i, settings, layout) for i in range(layout.workers)]
    gc.freeze()  # what every worker shares stays shared: the collector never writes to it
    for each in workers:
        each.start()
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
        for each in workers:
            if not each.pid:
                if now >= each.restart_at:
                    each.start()
                continue
            if (status := each.exit_code()) is None:
                continue
            if status == EXIT_BAD_SETTING:
                log.error("worker %d exited for a bad setting: stopping", each.index)
                each.pid = 0
                code = EXIT_BAD_SETTING
                stopping.set()
                break
            young = now - each.started < YOUNG_S
            each.pause = min(max(each.pause * 2, RESTART_PAUSE_MIN_S), RESTART_PAUSE_MAX_S)
            each.pause = each.pause if young else 0.0
            log.warning(
                "worker %d (pid %d) exited with %d: starting it again%s",
                each.index,
                each.pid,
                status,
                f" in {each.pause:.1f} s" if each.pause else "",
            )
            each.pid, each.restart_at = 0, now + each.pause
            if not each.pause:
                each.start()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for each in workers:
        if each.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(each.pid, signal.SIGTERM)
    for each in workers:
        if each.pid:
            each.wait(deadline)
    if code:
        raise SystemExit(code)
