"""One access-log line per request (method, path, status, ms) and the request latency
histogram by route template (app/metrics.py, RequestTimes), kept by the front door
(app/front.py) for every request, refused ones included.

The route is the template that served the request ("/v1/topics/{topic}/messages"), never
the path itself, so the metric's label set stays small: FastAPI leaves its route in the
scope, the ASGI fast path (app/fastpath.py) its own template; anything else is
``unmatched``.
"""

from __future__ import annotations

import logging
import time

from starlette.types import Scope

from app.metrics import RequestTimes

log = logging.getLogger("rocktimer.access")

ROUTE_KEY = "rocktimer.route"  # where the fast path puts the template it served
UNMATCHED = "unmatched"


def route_of(scope: Scope) -> str:
    template = scope.get(ROUTE_KEY)
    if template is None:
        template = getattr(scope.get("route"), "path", None)
    return template or UNMATCHED


class AccessLog:
    def __init__(self, times: RequestTimes, log_requests: bool) -> None:
        self.times = times
        self.log_requests = log_requests

    def done(self, scope: Scope, status: int, started: float) -> None:
        """Record a request answered with ``status``; ``started``: its perf_counter()."""
        seconds = time.perf_counter() - started
        method = scope["method"]
        self.times.observe(route_of(scope), method, seconds)
        if self.log_requests and log.isEnabledFor(logging.INFO):
            path = scope["path"]
            if scope.get("query_string"):
                path += "?" + scope["query_string"].decode("latin-1")
            ms = round(seconds * 1000, 1)
            log.info(
                "%s %s %d %.1fms",
                method,
                path,
                status,
                ms,
                extra={"method": method, "path": path, "status": status, "ms": ms},
            )
