"""One worker process of a partitioned data dir, forked by the supervisor
(app/cluster/supervisor.py) with the service's own settings, or, started again after it
exited, a new interpreter the keeper runs (app/cluster/keeper.py: ``main`` below).

It opens the engines of the partitions it owns (``k % workers == index``), each with its
share (1/P) of RocksDB's memory budgets, builds each one's app (create_app, unchanged) and serves
them through one router (app/cluster/router.py) on three sockets: the public port, which
every worker binds with SO_REUSEPORT (the kernel spreads connections over them), its
private unix socket under the data dir, where the other workers relay the requests for
its partitions, and its handoff socket, where they pass it connections
(app/cluster/handoff.py).
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import logging
import os
import signal
import socket
import sys
from typing import cast

import uvicorn

from app import logs
from app.__main__ import (
    EXIT_BAD_SETTING,
    EXIT_WORKER_DIED,
    Server,
    cannot_listen,
    fail,
    load_settings,
    open_engine,
    resolve_layout,
    server_config,
    tune_gc,
)
from app.cluster.handoff import Handoff, Passing
from app.cluster.layout import Layout
from app.cluster.locator import Workers
from app.cluster.router import Router
from app.config import Settings
from app.front import Service
from app.main import create_app
from workers.engine import Engine

BACKLOG = 2048  # uvicorn's default
SUN_PATH_MAX = 107  # sockaddr_un's path, less its terminating NUL
PR_SET_PDEATHSIG = 1

log = logging.getLogger("rocktimer")


def socket_path(layout: Layout, worker: int) -> str:
    return os.path.join(os.path.abspath(layout.data_dir), f"w{worker}.sock")


def check_socket_paths(layout: Layout) -> None:
    """The private sockets' paths fit a unix socket address, or one line and exit 2."""
    longest = socket_path(layout, layout.workers - 1)
    if len(longest.encode()) > SUN_PATH_MAX:
        fail(
            f"the data dir {os.path.abspath(layout.data_dir)} is too deep for the workers' "
            f"sockets ({longest!r} is over {SUN_PATH_MAX} bytes): set ROCKTIMER_DATA_DIR to a "
            "shorter path",
            EXIT_BAD_SETTING,
        )


def public_socket(settings: Settings, backlog: int = BACKLOG) -> socket.socket:
    """The public port, shared by every worker (SO_REUSEPORT), or one line and exit 1 when
    another process holds it. ``backlog`` 0: bound, not listening (the supervisor's check
    before it starts the workers: a socket that does not listen gets no connection)."""
    try:
        info = socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
    except OSError as exc:
        cannot_listen(settings, exc)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(info[4])
        if backlog:
            sock.listen(backlog)
    except OSError as exc:
        sock.close()
        cannot_listen(settings, exc)
    return sock


def private_socket(path: str) -> socket.socket:
    """This worker's unix socket; a former worker's file (it was killed) is replaced."""
    if os.path.exists(path):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, 0o600)
    sock.listen(BACKLOG)
    return sock


def partition_settings(settings: Settings, layout: Layout, k: int) -> Settings:
    return Settings.model_validate(
        {
            **settings.model_dump(),
            "data_dir": layout.partition_dir(k),
            "partitions": layout.partitions,  # as resolved from the data dir (GET /v1/limits)
        }
    )


def die_with_parent(parent: int) -> None:
    """SIGTERM when the supervisor (``parent``, the PID that started this process) dies,
    however it dies (Linux's PR_SET_PDEATHSIG); an exit now if it died before this call:
    a worker left behind would hold its partitions' stores, and the next start could not
    open them."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        raise SystemExit(0)


class WorkerServer(Server):
    """The service's server, which also adopts the connections other workers pass to this
    one (app/cluster/handoff.py) with its own protocol, until its stop begins."""

    def __init__(
        self, config: uvicorn.Config, settings: Settings, handoff: Handoff, *engines: Engine
    ) -> None:
        super().__init__(config, settings, *engines)
        self.handoff = handoff

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit or not self.started:
            return
        protocol = cast(type[Passing], self.config.http_protocol_class)

        def adopting() -> Passing:
            return protocol(
                config=self.config, server_state=self.server_state, app_state=self.lifespan.state
            )

        self.handoff.serve(asyncio.get_running_loop(), adopting)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.handoff.close()
        await super().shutdown(sockets)


def run(settings: Settings, layout: Layout, index: int) -> None:
    owned = layout.owned(index)
    engines = {}
    try:
        for k in owned:
            part = partition_settings(settings, layout, k)
            engine_config = dataclasses.replace(part.engine, partition=k)  # in sealed events
            # Each partition's store gets 1/P of RocksDB's budgets, however many of them
            # this process runs: P partitions over any number of workers hold what one
            # store of one process would.
            engines[k] = open_engine(part, engine_config, share=layout.partitions)
        apps: dict[int, Service] = {
            k: create_app(partition_settings(settings, layout, k), engine=engine)
            for k, engine in engines.items()
        }
        paths = [socket_path(layout, w) for w in range(layout.workers)]
        router = Router(Workers(layout, index, apps, paths), apps[min(apps)].limit)
        sockets = [public_socket(settings), private_socket(socket_path(layout, index))]
        handoff = Handoff(layout, index)
        handoff.listen()
        config = server_config(router, settings)
        protocol = cast(type[Passing], Passing.with_head_timeout(settings.header_timeout_ms))
        protocol.handoff = handoff
        config.http = protocol
        tune_gc()
        log.info("worker %d: partitions %s of %d", index, owned, layout.partitions)
        server = WorkerServer(config, settings, handoff, *engines.values())
        server.run(sockets=sockets)
    finally:  # closes the stores if the lifespan never ran (it stops the engines itself)
        for engine in engines.values():
            engine.stop()
    if server.worker_died:  # its supervisor starts it again
        raise SystemExit(EXIT_WORKER_DIED)


def main(argv: list[str]) -> None:
    """A worker started again by the keeper (app/cluster/keeper.py), as a new interpreter:
    ``python -m app.cluster.worker <index> <keeper's pid>``, with the service's environment."""
    settings = load_settings()
    logs.configure(settings.log_level, settings.log_format)
    layout, _ = resolve_layout(settings)
    die_with_parent(int(argv[2]))
    run(settings, layout, int(argv[1]))


if __name__ == "__main__":
    main(sys.argv)
