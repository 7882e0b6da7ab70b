"""What passing a client's connection to its owner costs (SCM_RIGHTS over a unix socket),
beside the same connection accepted by the owner itself: the routing option that moves
the connection instead of relaying each request (bench/hop.py measures the others).

Two child processes on uvloop, each answering a request with a fixed 201 (no framework,
no store: only the mechanism is measured):

- **owner**: accepts on its own port (baseline), and on a unix socket receives
  connections passed to it — the file descriptor and the bytes already read from it —
  adopts each into its loop (``connect_accepted_socket``) and answers the request that
  came with it, then every later one on that connection.
- **acceptor**: accepts on its port, reads the first request's bytes, and passes the
  connection with those bytes to the owner (``socket.send_fds``), then closes its copy.

The client opens a connection, sends one request, reads the reply and sends REQUESTS_PER
more on it, then closes; CONNECTIONS connections a round, both ways alternating. CPU is
both processes' from /proc over each way's windows: the pass's cost is the difference a
connection, paid once; the requests after it cost what the owner's own cost.

    python -m bench.fdpass          # BENCH_FDPASS_ROUNDS, BENCH_FDPASS_CONNECTIONS
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import socket
import time
from multiprocessing.connection import Connection as Pipe
from typing import cast

import uvloop

from bench.client import Connection, build_request, run
from tests.support import process

ROUNDS = int(os.environ.get("BENCH_FDPASS_ROUNDS", "6"))
CONNECTIONS = int(os.environ.get("BENCH_FDPASS_CONNECTIONS", "500"))
REQUESTS_PER = 1  # requests after the first on each connection
REPLY = b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}"
REQUEST = build_request("POST", process.HOST, "/v1/topics/t/messages", b'{"body":"x"}')


class Answering(asyncio.Protocol):
    """A 201 for every request (one a read: the client does not pipeline)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if b"\r\n\r\n" in data:
            self.transport.write(REPLY)


def owner(port: int, path: str, ready: Pipe) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task[None]] = set()
        await loop.create_server(Answering, process.HOST, port)
        inbox = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        inbox.bind(path)
        inbox.listen(16)
        inbox.setblocking(False)

        def passed(link: socket.socket) -> None:
            try:
                data, fds, _, _ = socket.recv_fds(link, 65536, 1)
            except BlockingIOError:
                return
            if not data and not fds:
                loop.remove_reader(link.fileno())
                link.close()
                return
            adopt(socket.socket(fileno=fds[0]), data)

        def adopt(conn: socket.socket, first: bytes) -> None:
            async def go() -> None:
                _, proto = await loop.connect_accepted_socket(Answering, conn)
                proto.data_received(first)

            tasks.add(task := loop.create_task(go()))
            task.add_done_callback(tasks.discard)

        def accept() -> None:
            link, _ = inbox.accept()
            link.setblocking(False)
            loop.add_reader(link.fileno(), passed, link)

        loop.add_reader(inbox.fileno(), accept)
        ready.send(os.getpid())
        await loop.create_future()

    uvloop.run(main())


class Passing(asyncio.Protocol):
    """The first read of a connection goes to the owner with the connection itself."""

    link: socket.socket

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        sock = self.transport.get_extra_info("socket")
        socket.send_fds(self.link, [data], [sock.fileno()])
        self.transport.abort()  # our copy only: the owner's descriptor keeps it open


def acceptor(port: int, path: str, ready: Pipe) -> None:
    async def main() -> None:
        link = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        link.connect(path)
        Passing.link = link
        await asyncio.get_running_loop().create_server(Passing, process.HOST, port)
        ready.send(os.getpid())
        await asyncio.get_running_loop().create_future()

    uvloop.run(main())


async def connections(port: int, n: int) -> None:
    """``n`` connections, one after another: open, 1 + REQUESTS_PER requests, close."""
    for _ in range(n):
        conn = await Connection.open(process.HOST, port)
        try:
            for _ in range(1 + REQUESTS_PER):
                reply = await conn.request(REQUEST, 10.0)
                if reply.status != 201:
                    raise RuntimeError(f"answered {reply.status}")
        finally:
            conn.close()


def measure(rounds: int = ROUNDS, n: int = CONNECTIONS) -> dict[str, float]:
    """µs of CPU a connection (both processes), each way."""
    import tempfile

    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="rocktimer-fdpass-") as tmp:
        path = os.path.join(tmp, "owner.sock")
        ports = {"accepted by the owner": process.free_port(), "passed": process.free_port()}
        a, b = ctx.Pipe()
        children = [ctx.Process(target=owner, args=(ports["accepted by the owner"], path, b))]
        children[0].start()
        pids = [a.recv()]
        children.append(ctx.Process(target=acceptor, args=(ports["passed"], path, b)))
        children[1].start()
        pids.append(a.recv())
        try:
            cpu = dict.fromkeys(ports, 0.0)
            for port in ports.values():  # warm-up
                run(lambda port=port: connections(port, 50))  # type: ignore[misc]
            for r in range(rounds):
                for name in list(ports) if r % 2 == 0 else reversed(list(ports)):
                    before = sum(process.cpu_seconds(p) for p in pids)
                    run(lambda port=ports[name]: connections(port, n))  # type: ignore[misc]
                    cpu[name] += sum(process.cpu_seconds(p) for p in pids) - before
            return {name: s / (rounds * n) * 1e6 for name, s in cpu.items()}
        finally:
            for child in children:
                child.kill()
                child.join()


def main() -> None:
    started = time.monotonic()
    got = measure()
    for name, us in got.items():
        print(f"{name:>22}: {us:6.1f} µs CPU a connection ({1 + REQUESTS_PER} requests)")
    base = got["accepted by the owner"]
    print(
        f"passing a connection: {got['passed'] - base:+.1f} µs, once a connection "
        f"({ROUNDS} rounds x {CONNECTIONS} connections, {time.monotonic() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
