"""``python -m app``: run the service with uvicorn: one process owning the store, or, for a
partitioned data dir, a supervisor of worker processes (app/cluster/), or, with
ROCKTIMER_CLUSTER, a node of a cluster (app/cluster/node.py).

What can go wrong at start is said in one line on stderr, never a traceback: a bad
setting (naming the variable and what it accepts), a data dir another process holds, a
port another process listens on.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import re
import socket
import sys
import threading
from typing import Any, NoReturn

import uvicorn
from pydantic import ValidationError
from pydantic_settings import SettingsError
from starlette.types import ASGIApp

from app import logs
from app.cluster import layout
from app.cluster.layout import Layout
from app.config import Settings
from app.http import BoundedHeaders
from app.main import create_app
from storage.errors import StorageError
from workers.engine import Engine, EngineConfig
from workers.writer import Changelog

GC_GEN0_THRESHOLD = 70_000
GRACEFUL_SHUTDOWN_S = 5  # open long polls are answered at once; this bounds the rest
EXIT_BAD_SETTING = 2  # as a bad command line
EXIT_CANNOT_START = 1
EXIT_WORKER_DIED = 3  # a worker thread ended: the supervisor (docker, systemd) restarts us
WATCH_TICKS = 5  # uvicorn ticks every 0.1 s: the workers are looked at every 0.5 s
# After a worker died, the clean stop gets this long; then the process ends regardless.
DEATH_STOP_S = 30.0

log = logging.getLogger("rocktimer")


def tune_gc() -> None:
    """Run the cyclic garbage collector a hundred times less often, over fewer objects.

    A batch send makes thousands of short-lived objects (models, records, result dicts),
    none in reference cycles; with the default threshold (700 allocations) the collector
    ran every few dozen items and took 15 % of a batch send, and its pauses were the single
    send's p99. What is loaded at start-up is frozen out of its
    sight; cycles that do form (exceptions with tracebacks) are still collected.
    """
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, 20, 100)


def fail(message: str, code: int) -> NoReturn:
    print(f"rocktimer: {message}", file=sys.stderr)
    raise SystemExit(code)


def _accepts(field: str) -> str:
    """What a setting accepts, from its declaration (type and bounds)."""
    if field == "api_keys":
        return 'a JSON object {"<key>": "producer" | "consumer" | "admin", ...}'
    info = Settings.model_fields[field]
    if info.description:
        return info.description
    choices = getattr(info.annotation, "__args__", None)
    if choices and all(isinstance(c, str) for c in choices):
        return " | ".join(choices)
    if info.annotation is bool:
        return "true or false"
    if info.annotation is int:
        low = next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
        high = next((m.le for m in info.metadata if hasattr(m, "le")), None)
        if low is not None and high is not None:
            return f"an integer from {low} to {high}"
        if low is not None:
            return f"an integer >= {low}"
        return "an integer"
    return "a string"


def _env(field: str) -> str:
    return f"ROCKTIMER_{field.upper()}"


def describe(exc: ValidationError | SettingsError) -> str:
    """One line naming each bad variable, its value and what it accepts."""
    if isinstance(exc, SettingsError):  # a value pydantic-settings could not even parse
        found = re.search(r'field "(\w+)"', str(exc))
        field = found.group(1) if found else "api_keys"
        return f"bad setting {_env(field)}: not valid JSON; it accepts {_accepts(field)}"
    parts = []
    for err in exc.errors(include_url=False):
        field = str(err["loc"][0])
        where = ".".join(str(p) for p in err["loc"][1:])
        value: Any = err.get("input")
        subject = f"{_env(field)}={value!r}" if not where else f"{_env(field)} ({where!r})"
        reason = "not of that form" if err["type"] == "string_pattern_mismatch" else err["msg"]
        parts.append(f"{subject}: {reason}; it accepts {_accepts(field)}")
    return "bad setting " + "; ".join(parts)


def load_settings() -> Settings:
    try:
        return Settings()
    except (ValidationError, SettingsError) as exc:
        fail(describe(exc), EXIT_BAD_SETTING)


def open_engine(
    settings: Settings,
    config: EngineConfig | None = None,
    share: int = 1,
    changelog: Changelog | None = None,
) -> Engine:
    """The engine on ``config`` (settings.engine if None), or one line and an exit.
    ``share``: the partitions of the data dir (app/cluster/), splitting RocksDB's memory;
    ``changelog``: its partition is replicated (cluster mode, app/cluster/replica/)."""
    config = config or settings.engine
    data_dir = config.data_dir
    try:
        return Engine(config, memory_share=share, changelog=changelog)
    except StorageError as exc:
        if "lock" in str(exc).lower():
            fail(
                f"the data dir {data_dir} is in use by another process (it holds "
                f"{data_dir}/LOCK): stop that one, or set ROCKTIMER_DATA_DIR to another "
                "directory",
                EXIT_CANNOT_START,
            )
        fail(f"cannot open the data dir {data_dir}: {exc}", EXIT_CANNOT_START)
    except OSError as exc:
        fail(f"cannot use the data dir {data_dir}: {exc.strerror or exc}", EXIT_CANNOT_START)


def resolve_layout(settings: Settings) -> tuple[Layout, str]:
    """The data dir's partitions and the worker processes to run, and a line to log once
    the start got past what can stop it (fewer workers than cores); or one line and exit 2."""
    try:
        found, note = layout.resolve(
            settings.data_dir,
            settings.partitions,
            settings.workers,
            layout.default_workers(settings.port),
        )
    except layout.LayoutError as exc:
        fail(str(exc), EXIT_BAD_SETTING)
    except OSError as exc:
        fail(
            f"cannot use the data dir {settings.data_dir}: {exc.strerror or exc}", EXIT_CANNOT_START
        )
    return found, note


def listen(settings: Settings) -> socket.socket:
    """The listening socket, bound before anything else starts: a port in use is one line
    and exit 1 before the store opens, and "ready" is never said of a server that cannot
    serve."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT at restart
    try:
        sock.bind((settings.host, settings.port))
    except OSError as exc:
        sock.close()
        cannot_listen(settings, exc)
    return sock


def claim_port(settings: Settings) -> socket.socket | None:
    """The port claimed for this server as long as it runs, or one line and exit 2 when
    another rocktimer serves it; None on port 0 (a port of its own).

    A partitioned server's workers bind the public port with SO_REUSEPORT, which a second
    rocktimer's workers would share: the kernel would spread the port's connections over
    two servers with different data. The claim is a unix socket in the abstract namespace
    named after the port (of the same network namespace as the port itself), bound
    without listening: a name only one socket can hold, which the kernel frees when the
    last descriptor of it closes, however the server ends — no file is left behind. Every
    rocktimer start takes it whatever its workers, so a second start fails as the first
    step, and the first serves on."""
    if settings.port == 0:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(f"\0rocktimer/port/{settings.port}")
    except OSError as exc:
        sock.close()
        where = f"{settings.host}:{settings.port}"
        if exc.errno == errno.EADDRINUSE:
            fail(
                f"cannot listen on {where}: another rocktimer serves this port (stop it, or "
                "set ROCKTIMER_PORT to another port)",
                EXIT_BAD_SETTING,
            )
        fail(f"cannot listen on {where}: {exc.strerror or exc}", EXIT_CANNOT_START)
    return sock


def cannot_listen(settings: Settings, exc: OSError) -> NoReturn:
    where = f"{settings.host}:{settings.port}"
    if exc.errno == errno.EADDRINUSE:
        fail(
            f"cannot listen on {where}: another process holds the port (stop it, or set "
            "ROCKTIMER_PORT to another port)",
            EXIT_CANNOT_START,
        )
    fail(f"cannot listen on {where}: {exc.strerror or exc}", EXIT_CANNOT_START)


class Server(uvicorn.Server):
    """uvicorn's server, which says it is ready once it serves, and answers the open long
    polls (empty) and ends the open streams the moment a stop begins: a long poll would
    otherwise hold the stop for up to its wait_ms (30 s), a stream until its client goes.

    It also watches the engine's worker threads: if one ends (whatever the reason), it
    logs which and why, stops as on SIGTERM and the process exits with EXIT_WORKER_DIED,
    for its supervisor to start it again (a restart rescans every timer). A server that
    kept answering 201 while nothing is delivered is the one outcome not allowed."""

    def __init__(self, config: uvicorn.Config, settings: Settings, *engines: Engine) -> None:
        super().__init__(config)
        self.engines = list(
            engines
        )  # a cluster node adds and removes its own (app/cluster/node.py)
        self.settings = settings
        self.worker_died = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit or not self.started:
            return
        host, port = sockets[0].getsockname()[:2] if sockets else (self.config.host, 0)
        log.info(
            "rocktimer ready on http://%s:%d: data_dir=%s pending_timers=%d",
            f"[{host}]" if ":" in host else host,
            port,
            self.settings.data_dir,
            sum(engine.writer.pending_timers for engine in self.engines),
        )

    async def on_tick(self, counter: int) -> bool:
        if counter % WATCH_TICKS == 0 and not self.worker_died:
            dead = [name for engine in self.engines for name in engine.dead_workers()]
            if dead:
                log.critical("stopping: a worker thread ended (%s)", "; ".join(dead))
                self.worker_died = True
                self.should_exit = True
                # If the stop itself hangs on what broke, end the process anyway.
                ending = threading.Timer(DEATH_STOP_S, os._exit, (EXIT_WORKER_DIED,))
                ending.daemon = True
                ending.start()
        return await super().on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for engine in self.engines:
            engine.release_long_polls()
        await super().shutdown(sockets)


def server_config(app: ASGIApp, settings: Settings) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        log_config=None,  # logs.configure's handler formats uvicorn's lines too
        access_log=False,  # ours (app/access.py) has the time taken
        loop="uvloop",
        ws="none",  # no WebSocket route: uvicorn's default would import a WebSocket library
        http=BoundedHeaders.with_head_timeout(settings.header_timeout_ms),
        # No X-Forwarded-For rewriting: nothing here reads the client's address, and the
        # middleware it takes would sit in front of every request (app/front.py).
        proxy_headers=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )


def main() -> None:
    settings = load_settings()
    logs.configure(settings.log_level, settings.log_format)
    claim = claim_port(settings)  # held until this process (or its keeper) ends
    if settings.cluster:
        from app.cluster import node

        node.run(settings)
        return
    found, note = resolve_layout(settings)
    if found.partitions > 1:
        from app.cluster import supervisor

        supervisor.run(settings, found, note, claim)
        return
    sock = listen(settings)
    engine = open_engine(settings)
    if note:
        log.info(note)
    app = create_app(settings, engine=engine)
    tune_gc()
    server = Server(server_config(app, settings), settings, engine)
    try:
        server.run(sockets=[sock])
    finally:  # closes the store if the lifespan never ran (it stops the engine itself)
        engine.stop()
    if server.worker_died:
        raise SystemExit(EXIT_WORKER_DIED)


if __name__ == "__main__":
    main()
