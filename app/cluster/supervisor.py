"""The supervisor of a partitioned data dir's workers (``python -m app`` when P > 1).

It forks ROCKTIMER_WORKERS worker processes (app/cluster/worker.py), each owning the
partitions ``k % workers == index``, from its own imports (their pages shared), then
replaces itself with the keeper (app/cluster/keeper.py: same PID, a small interpreter),
which starts a worker that exits again, stops them all for a bad setting, and stops
them on SIGTERM or SIGINT. It holds no store and no thread, and one socket: the port's
claim (app/__main__.py's ``claim_port``), which the keeper keeps and no worker holds.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import os
import signal
import socket
import sys
import traceback
from pathlib import Path
from types import FrameType

from app.__main__ import EXIT_BAD_SETTING, EXIT_CANNOT_START, GRACEFUL_SHUTDOWN_S, fail
from app.cluster import keeper, worker
from app.cluster.layout import Layout, keep
from app.cluster.worker import check_socket_paths, die_with_parent, public_socket
from app.config import Settings

STOP_TIMEOUT_S = GRACEFUL_SHUTDOWN_S + 1.0
ROOT = str(Path(__file__).resolve().parents[2])  # where ``app`` is imported from

log = logging.getLogger("rocktimer")

# What a worker imports only once it starts serving (uvicorn loads its loop and lifespan
# by name, asyncio its executor on first use, the exporter its segments' module when it
# runs): imported here, before the fork, their pages are shared by every worker instead
# of one copy each.
IMPORTED_BY_SERVING = (
    "concurrent.futures.thread",
    "uvicorn.lifespan.on",
    "uvicorn.loops.uvloop",
    "uvloop",
    "workers.segments",
)


def fork_worker(index: int, settings: Settings, layout: Layout, claim: socket.socket | None) -> int:
    """Worker ``index`` forked from this process, which has already imported what a worker
    runs and holds no thread, socket or store: its start skips the interpreter's and the
    imports (most of a start), and the imported pages stay shared. Its PID."""
    supervisor = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        if claim is not None:  # the keeper's alone: a worker still stopping after the
            claim.close()  # keeper died must not keep another start from the port
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)  # uvicorn sets its own
        die_with_parent(supervisor)
        worker.run(settings, layout, index)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run(
    settings: Settings, layout: Layout, note: str = "", claim: socket.socket | None = None
) -> None:
    """Serve ``layout`` until SIGTERM; ``note``: a line to log once the start is sure
    (app/cluster/layout.py's reason for fewer workers than cores); ``claim``: the port's
    (app/__main__.py's ``claim_port``), which the keeper holds from here on."""
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
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for name in IMPORTED_BY_SERVING:
        importlib.import_module(name)
    gc.freeze()  # what every worker shares stays shared: the collector never writes to it
    pids = [fork_worker(i, settings, layout, claim) for i in range(layout.workers)]
    log.info(
        "%d workers, %d partitions, on %s:%d",
        layout.workers,
        layout.partitions,
        settings.host,
        settings.port,
    )
    if stopping:  # asked to stop while forking: the keeper would not know it
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in pids:
            os.waitpid(pid, 0)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    claimed = -1
    if claim is not None:
        claimed = claim.fileno()
        os.set_inheritable(claimed, True)  # kept open through the exec
    argv = keeper.boot_argv(
        ROOT,
        pids,
        claim_fd=claimed,
        bad_setting=EXIT_BAD_SETTING,
        stop_timeout_s=STOP_TIMEOUT_S,
        log_format=settings.log_format,
    )
    os.execv(argv[0], argv)
