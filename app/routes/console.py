"""The web console (/ui) and the two calls it needs beyond the resource API: who the caller
is, and an overview of the engine in one bounded read (api.md, "Console")."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

from app.auth import allow
from app.config import Role
from app.deps import engine_of, settings_of
from app.openapi import V1, replies
from app.schemas import Identity, Stats
from app.wire import json_response
from workers.ops import views

UI_DIR = Path(__file__).resolve().parent.parent / "ui" / "static"
DUE_BUCKET_MS = 60_000  # the overview's histogram: one bar per minute ...
DUE_HORIZON_MS = 3_600_000  # ... for the next hour
# Timer keys read for that histogram at most: ~10 ms of scan here (2.2M keys/s), so the
# overview stays cheap with millions scheduled; past it the chart says "capped".
DUE_SCAN_MAX = 20_000

router = APIRouter(tags=["console"])
static = StaticFiles(directory=UI_DIR)


# The console's page loads only its own files and talks only to this service; no other
# site may frame it (a click on a framed "Redrive" or "Save settings" is a click here).
CONSOLE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",  # for browsers that predate frame-ancestors
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@router.get("/ui", include_in_schema=False)
async def console() -> FileResponse:
    return FileResponse(UI_DIR / "index.html", headers=CONSOLE_HEADERS)


@router.get(
    "/v1/me",
    operation_id="who_am_i",
    summary="The caller's role (any valid API key; admin when the service is open)",
    responses=replies({200: Identity}, 401),
)
@allow(*Role)
async def who_am_i(request: Request) -> Response:
    keys_by_token = settings_of(request).api_keys
    if not keys_by_token:
        return json_response({"role": Role.ADMIN.value, "open": True})
    return json_response({"role": request.scope["rocktimer.role"], "open": False})


@router.get(
    "/v1/stats",
    operation_id="get_stats",
    summary="Overview for the console: pending, delivered, lateness, due in the next hour",
    responses=replies({200: Stats}, *V1),
)
@allow(*Role)
async def get_stats(request: Request) -> Response:
    engine = engine_of(request)
    lateness = engine.lateness_ms
    delivered = lateness.count  # every delivery is observed once: the count is the total
    now = engine.clock.now_ms()
    ahead = views.due_ahead(
        engine.store, now, DUE_BUCKET_MS, DUE_HORIZON_MS // DUE_BUCKET_MS, DUE_SCAN_MAX
    )
    return json_response(
        {
            "now_ms": now,
            "pending_timers": engine.writer.pending_timers,
            "writer_queue": engine.writer.queue_depth,
            "long_polls": engine.long_polls.waiting,
            "delivered_total": delivered,
            "lateness": {
                "count": delivered,
                "p50_ms": lateness.quantile(0.5),
                "p99_ms": lateness.quantile(0.99),
            },
            "due_ahead": {
                "bucket_ms": DUE_BUCKET_MS,
                "counts": ahead.counts,
                "capped": ahead.capped,
            },
        }
    )
