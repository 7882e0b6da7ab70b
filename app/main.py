"""The app factory: settings, engine lifespan, routes, error handlers, OpenAPI."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app import errors, openapi
from app.access import AccessLog
from app.auth import ApiKeys
from app.config import Settings
from app.front import Service
from app.limits import BodyLimit, HeadAsGet
from app.metrics import RequestTimes, registry_for
from app.origin import BrowserGuard, served_names
from app.push.pusher import Pusher
from app.routes import admin, browse, console, consumers, producers, schedules, service
from workers.clock import Clock
from workers.engine import Engine

log = logging.getLogger("rocktimer")


def create_app(
    settings: Settings | None = None, clock: Clock | None = None, engine: Engine | None = None
) -> Service:
    """The service; ``engine``: one already opened on ``settings.engine`` (``python -m app``
    opens it first, to say in one line why it cannot), else the lifespan opens one."""
    settings = settings or Settings()
    request_times = RequestTimes()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal engine
        engine = engine or Engine(settings.engine, clock)
        engine.start()
        pusher = Pusher(engine, settings.allowed_push_hosts)
        pusher.start()
        app.state.engine = engine
        app.state.pusher = pusher
        app.state.registry = registry_for(engine, request_times, pusher)
        if not settings.api_keys:
            log.warning("ROCKTIMER_API_KEYS is not set: the API is open to anyone (development)")
        try:
            yield
        finally:
            engine.release_long_polls()  # if the server did not already at its stop signal
            await pusher.stop()
            await asyncio.to_thread(engine.stop)
            engine = None
            log.info("rocktimer stopped cleanly")

    app = Service(
        # FastAPI's built-in OpenTelemetry checks its providers on every request; this
        # service exports Prometheus metrics instead (/metrics).
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
        title="rocktimer",
        version="1",
        summary="Scheduled messages: millisecond precision, years of delay, cancel, retry, DLQ",
        lifespan=lifespan,
        # No trailing-slash redirects: ".../messages/%2F" must not 307 to another resource.
        redirect_slashes=False,
        docs_url=None,  # served from the package's own Swagger UI copy (routes/service.py)
        redoc_url=None,  # it loads from a CDN: blank without internet
    )
    app.state.settings = settings
    errors.install(app)
    app.include_router(producers.router)
    app.include_router(schedules.router)
    app.include_router(consumers.router)
    app.include_router(admin.router)
    app.include_router(browse.router)
    app.include_router(service.router)
    service.mount_docs(app)
    app.include_router(console.router)
    app.mount("/ui/static", console.static, name="console-static")
    app.add_middleware(HeadAsGet)
    # The front door's gates (app/front.py): every request passes them first.
    app.access = AccessLog(request_times, settings.access_log)
    app.keys = ApiKeys(settings.api_keys, app.router.routes) if settings.api_keys else None
    names = served_names(settings.host, settings.served_hosts)
    app.guard = None if settings.api_keys else BrowserGuard(names)
    app.limit = BodyLimit(settings.max_request_bytes)
    openapi.install(app)
    return app
