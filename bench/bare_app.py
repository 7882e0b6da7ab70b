"""The ceiling of figure 1: a bare FastAPI app with one POST route and nothing behind it.

Same path shape as the service's send (one path parameter), the body read with orjson, a
small orjson reply of the same size and status, served by uvicorn with the service's own
settings (app/__main__.py: one worker, uvloop, httptools, no access log, the same garbage
collector tuning). Whatever the
service's send costs beyond this is validation, the engine and the durable commit.

    python -m bench.bare_app --host 127.0.0.1 --port 8090
"""

from __future__ import annotations

import argparse
import time

import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

from app.__main__ import tune_gc

ROUTE = "/v1/topics/bench/messages"  # the service's send path, so routing costs the same


def create_app() -> FastAPI:
    # The same FastAPI settings as the service (app/main.py): built-in telemetry off.
    app = FastAPI(
        title="bare",
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )

    @app.post("/v1/topics/{topic}/messages", status_code=201)
    async def send(topic: str, request: Request) -> Response:
        msg = orjson.loads(await request.body())
        now = time.time_ns() // 1_000_000
        reply = {
            "topic": topic,
            "msg_id": "01JBARE0000000000000000000",
            "state": "scheduled",
            "deliver_at_ms": now + int(msg.get("delay_ms", 0)),
            "created_at_ms": now,
        }
        return Response(orjson.dumps(reply), status_code=201, media_type="application/json")

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description="the bare FastAPI ceiling of bench figure 1")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args()
    app = create_app()
    tune_gc()
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        loop="uvloop",
        http="httptools",
    )


if __name__ == "__main__":
    main()
