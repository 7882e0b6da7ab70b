"""Figure 12: durable reschedules over HTTP vs durable single sends, same server, same run.

64 keep-alive clients (as figure 1) first send (``POST``, one-hour delay), then each
reschedules one message of its own to a time one to two hours ahead (``PATCH``, alternate
delays so every request moves the timer key), closed loop. Target: reschedule >= 0.9 x
the single-send rate.

    python -m bench.reschedule
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench import report, scale
from bench.bare_app import ROUTE
from bench.client import Client, build_request, run
from bench.send import CONNECTIONS, MESSAGE, LoadResult, closed_loop
from tests.support import process

TARGET_RATIO = 0.9
MSG_ID = "moved"


async def _prepare(port: int) -> None:
    client = Client(process.HOST, port)
    try:
        body = {"msg_id": MSG_ID, "body": "hello, rocktimer", "delay_ms": 3_600_000}
        r = await client.call("POST", ROUTE, body)
        if r.status != 201:
            raise RuntimeError(f"could not schedule the message to move: {r.status}")
    finally:
        client.close()


def _loop(server: process.ServerProcess, request: bytes, expect: int, s: scale.Scale) -> LoadResult:
    return run(
        lambda: closed_loop(
            server.port,
            request,
            connections=CONNECTIONS,
            warmup_s=s.send_warmup_s,
            seconds=s.send_seconds,
            expect=expect,
            server_pid=server.pid,
        )
    )


def run_figure(s: scale.Scale) -> list[report.Row]:
    with (
        tempfile.TemporaryDirectory(prefix="rocktimer-bench-reschedule-") as tmp,
        process.service(Path(tmp)) as service,
    ):
        host = f"{process.HOST}:{service.port}"
        sends = _loop(service, build_request("POST", host, ROUTE, MESSAGE), 201, s)
        run(lambda: _prepare(service.port))
        patch = build_request("PATCH", host, f"{ROUTE}/{MSG_ID}", b'{"delay_ms":7200000}')
        moves = _loop(service, patch, 200, s)
    ratio = moves.rate / sends.rate if sends.rate else 0.0
    return [
        report.Row(
            "12",
            f"durable reschedule (PATCH), {CONNECTIONS} keep-alive clients",
            f"{moves.rate:,.0f} req/s",
            f"single send {sends.rate:,.0f} req/s",
            f"{ratio:.2f}",
            f">= {TARGET_RATIO}",
            ratio >= TARGET_RATIO and not moves.errors and not sends.errors,
            f"latency {moves.latency_ms.ms()} (send {sends.latency_ms.ms()}); {moves.cpu}",
        )
    ]


def main() -> None:
    s = scale.current()
    print(report.table(run_figure(s), s.name))


if __name__ == "__main__":
    main()
