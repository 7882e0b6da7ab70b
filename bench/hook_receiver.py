"""Figure 17's webhook receiver: as fast as a local HTTP/1.1 server gets in Python (uvloop,
httptools, no framework), so what the figure measures is the service's push.

``POST /hook`` answers 200 at once and, for a message's first attempt, notes the
lateness ``now − deliver_at_ms`` (its wall clock, ms) and the service's own
``delivered_at_ms − deliver_at_ms``. ``GET /count`` returns the count alone (what a
waiting bench polls: serializing 100k lateness values every poll blocked this loop and
delayed the very arrivals it stamps), ``GET /stats`` the count and those lists (read once,
at the end); ``POST /reset`` clears them.

    python -m bench.hook_receiver --port 8091
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httptools
import orjson
import uvloop

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


class Ledger:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.last_ns = 0  # time.time_ns() of the last POST
        self.lateness_ms: list[float] = []  # due -> received here, first attempts
        self.to_log_ms: list[int] = []  # due -> topic log (the service's stamps)

    def note(self, body: bytes) -> None:
        now_ns = time.time_ns()
        self.count += 1
        self.last_ns = now_ns
        item = orjson.loads(body)
        if item.get("attempt") == 1 and "deliver_at_ms" in item:
            self.lateness_ms.append(now_ns / 1e6 - item["deliver_at_ms"])
            self.to_log_ms.append(item["delivered_at_ms"] - item["deliver_at_ms"])

    def count_only(self) -> bytes:
        return orjson.dumps({"count": self.count})

    def stats(self) -> bytes:
        return orjson.dumps(
            {
                "count": self.count,
                "last_ns": self.last_ns,
                "lateness_ms": self.lateness_ms,
                "to_log_ms": self.to_log_ms,
            }
        )


class Receiver(asyncio.Protocol):
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        url, body = self.url, b"".join(self.body)
        self.url, self.body = b"", []
        if url in (b"/stats", b"/count"):
            reply = self.ledger.stats() if url == b"/stats" else self.ledger.count_only()
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d"
            self.transport.write(head % len(reply) + b"\r\n\r\n" + reply)
            return
        if url == b"/reset":
            self.ledger.reset()
        else:
            self.ledger.note(body)
        self.transport.write(OK)


async def serve(host: str, port: int) -> None:
    ledger = Ledger()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Receiver(ledger), host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description="figure 17's webhook receiver")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8091)
    args = parser.parse_args()
    uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
