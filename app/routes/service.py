"""Service routes: liveness, readiness, Prometheus metrics, the API docs (no API key needed)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]

from app.defaults import MAX_BATCH
from app.deps import engine_of, settings_of
from app.errors import NotReady
from app.openapi import replies
from app.schemas import Health, Limits
from app.wire import json_response

router = APIRouter(tags=["service"])


@router.get(
    "/healthz", operation_id="healthz", summary="Liveness", responses=replies({200: Health})
)
async def healthz() -> Response:
    return json_response({"status": "alive"})


@router.get(
    "/readyz",
    operation_id="readyz",
    summary="Readiness: the store is open and the workers run",
    responses=replies({200: Health}, 503, why={503: "Not ready (starting, stopping or failing)"}),
)
async def readyz(request: Request) -> Response:
    engine = engine_of(request)
    if not engine.healthy:
        raise NotReady("the store or a worker is not running")
    lag = engine.lag
    return json_response(
        {
            "status": "lagging" if lag.lagging() else "ready",
            "pending_timers": engine.writer.pending_timers,
            "writer_queue": engine.writer.queue_depth,
            "due_backlog_timers": lag.timers(),
            "due_backlog_oldest_ms": lag.age_ms(),
        }
    )


@router.get(
    "/v1/limits",
    operation_id="get_limits",
    summary="What the service accepts: request and batch sizes, body and delay limits",
    responses=replies({200: Limits}),
)
async def get_limits(request: Request) -> Response:
    settings = settings_of(request)
    return json_response(
        {
            "max_request_bytes": settings.max_request_bytes,
            "max_batch": MAX_BATCH,
            "max_body_bytes": settings.max_body_bytes,
            "max_properties": settings.max_properties,
            "max_delay_ms": settings.max_delay_ms,
            "partitions": max(1, settings.partitions),
        }
    )


@router.get(
    "/metrics",
    operation_id="metrics",
    summary="Prometheus metrics (text exposition format)",
    response_class=Response,
    responses={
        200: {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
    },
)
async def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)


DOCS_ASSETS = "/docs/static"  # Swagger UI's files, from its PyPI package: /docs works offline


@router.get("/docs", include_in_schema=False)
async def docs() -> HTMLResponse:
    page = get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="rocktimer API",
        swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
    )
    # Its "Try it out" sends real requests: no other site may frame it under a decoy.
    page.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
    page.headers["X-Frame-Options"] = "DENY"
    return page


def mount_docs(app: FastAPI) -> None:
    app.mount(DOCS_ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui")
