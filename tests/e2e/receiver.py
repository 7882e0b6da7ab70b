"""A real webhook receiver for the push tests: the standard library's threading HTTP/1.1
server on 127.0.0.1 (a free port), answering by path, keeping a ledger of every POST.

Paths (the push url of a group picks its behaviour):
  /ok              200
  /fail/<n>        500 to a message's first n POSTs, then 200
  /busy/<s>        429 with Retry-After: <s> to a message's first POST, then 200
  /hang            no reply until the receiver closes (the pusher's timeout fails it)
  /slow/<ms>       200 after <ms>
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import orjson

from tests.support.process import HOST, free_port

HANG_LIMIT_S = 120.0  # a hanging reply's thread ends by then even if nobody closes


class Hit(NamedTuple):
    path: str
    msg_id: str
    attempt: int
    status: int  # what the receiver answered (0: nothing, it hung)
    at_ns: int  # time.time_ns() when the POST arrived
    item: dict[str, Any]


class Receiver:
    def __init__(self) -> None:
        self.port = free_port()
        self.hits: list[Hit] = []
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.seen: Counter[tuple[str, str]] = Counter()  # (path, msg_id) → POSTs
        self.last_arrival_ns = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.answer(self, body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128  # the default 5 drops connects of a burst: 1 s retries

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a pusher that timed out closed the connection under a hanging reply

        self.server = Server((HOST, self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="test-receiver")

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    def answer(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        arrived_ns = time.time_ns()
        item = orjson.loads(body)
        path = handler.path
        kind, _, arg = path.strip("/").partition("/")
        with self.lock:
            self.seen[path, item["msg_id"]] += 1
            self.last_arrival_ns = arrived_ns
            posts = self.seen[path, item["msg_id"]]
        status, headers = 200, {}
        if kind == "fail" and posts <= int(arg):
            status = 500
        elif kind == "busy" and posts == 1:
            status, headers = 429, {"Retry-After": arg}
        elif kind == "slow":
            time.sleep(int(arg) / 1000)
        hit = Hit(path, item["msg_id"], item["attempt"], status, arrived_ns, item)
        if kind == "hang":
            with self.lock:
                self.hits.append(hit._replace(status=0))
            self.released.wait(HANG_LIMIT_S)
            return
        with self.lock:
            self.hits.append(hit)
        handler.send_response(status)
        for name, value in {**headers, "Content-Length": "0"}.items():
            handler.send_header(name, value)
        handler.end_headers()

    def quiet(self, for_s: float, timeout_s: float = 30.0) -> int:
        """Wait until no POST has arrived for `for_s` (what a killed pusher wrote before it
        died is read by then); return time.time_ns() at that moment."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            now_ns = time.time_ns()
            with self.lock:
                idle_s = (now_ns - self.last_arrival_ns) / 1e9
            if idle_s >= for_s:
                return now_ns
            time.sleep(for_s - idle_s)
        raise AssertionError(f"POSTs kept arriving for {timeout_s} s")

    def of(self, path: str) -> list[Hit]:
        with self.lock:
            return [h for h in self.hits if h.path == path]
