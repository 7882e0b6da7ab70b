"""How a request reaches its partition's owner, each way measured in the same run: the CPU
a single send and a batch send of 1000 cost (every process on the path) and their rates.

One server, ROCKTIMER_WORKERS=2 and 2 partitions; every route ends at the owner of the
topic sent to (partition 1's topic, worker 1, except for the baseline):

- **direct** (baseline): a connection the kernel gave to the owner itself (SO_REUSEPORT),
  a topic it owns: no hop at all.
- **passed** (the service's own routing for a connection's first request): a connection
  the kernel gave to the other worker, whose first request was for the owner's topic:
  passed to the owner (app/cluster/handoff.py), which answers it from then on. The pass
  itself happens on each window's first request a connection (not counted:
  bench/fdpass.py measures it).
- **hop**: a connection the kernel gave to the other worker, whose first request had no
  topic (it stays there): every request relayed over the owner's unix socket
  (app/cluster/relay.py).
- **haproxy** (if installed): a front proxy on its own port picking the owner's unix
  socket by the topic in the path, with the service's own hash
  (``use_backend w%[path,field(4,/),crc32,mod(2)]``): one thread, keep-alive both sides.
- **nginx** (if installed): the same with nginx (one process, keep-alive upstreams; nginx
  has no crc32 of a variable, so the topic's owner comes from a ``map``, which costs
  what its ``hash $topic consistent`` would).

Which worker accepted a client's connection is read from /proc (the server side of the
client's port, in which worker's fds). Each round runs every route in turn (order
rotating), first CONNECTIONS keep-alive clients sending figure 1's durable single send
in a closed loop (SENDS_PER_ROUND in all), then 2 connections sending figure 2's batch of
1000 (BATCHES_PER_ROUND in all). CPU is every server process's (and the proxy's) from
/proc over each window.

    python -m bench.hop                 # BENCH_HOP_ROUNDS, BENCH_HOP_SENDS, BENCH_HOP_BATCHES
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench import batch, loader
from bench.client import Connection, build_request, run
from tests.support import process

CONNECTIONS = 8
BATCH_CONNECTIONS = 2
ROUNDS = int(os.environ.get("BENCH_HOP_ROUNDS", "6"))
SENDS_PER_ROUND = int(os.environ.get("BENCH_HOP_SENDS", "3000"))
BATCHES_PER_ROUND = int(os.environ.get("BENCH_HOP_BATCHES", "40"))
MESSAGE = b'{"body":"hello, rocktimer","delay_ms":3600000}'
HEALTH = build_request("GET", process.HOST, "/healthz")
REQUEST_TIMEOUT_S = 30.0
MAX_OPENED = 200  # connections tried before giving up on finding enough on one worker
PROXY_START_S = 10.0


def topic_of(partition: int, partitions: int) -> str:
    i = 0
    while zlib.crc32(f"hop{i}".encode()) % partitions != partition:
        i += 1
    return f"hop{i}"


def accepted_by(client_port: int, server_port: int, pids: dict[int, int]) -> int | None:
    """The worker holding the server side of the connection from ``client_port``."""
    want = f"{client_port:04X}"
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1].split(":")[1], fields[2].split(":")[1]
        if int(local, 16) == server_port and remote == want:
            inode = fields[9]
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for index, pid in pids.items():
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.iterdir():
            try:
                if os.readlink(fd) == target:
                    return index
            except OSError:
                continue
    return None


def cpu(pids: list[int]) -> float:
    return sum(process.cpu_seconds(pid) for pid in pids)


# --- the proxies ------------------------------------------------------------------------


def haproxy_config(port: int, sockets: list[str]) -> str:
    backends = "".join(
        f"backend w{i}\n    server owner unix@{path}\n" for i, path in enumerate(sockets)
    )
    return f"""global
    nbthread 1
    maxconn 4096
defaults
    mode http
    option http-keep-alive
    http-reuse never
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
frontend front
    bind {process.HOST}:{port}
    use_backend w%[path,field(4,/),crc32,mod({len(sockets)})]
{backends}"""


def nginx_config(port: int, sockets: list[str], owners: dict[str, int], tmp: Path) -> str:
    upstreams = "".join(
        f"upstream w{i} {{ server unix:{path}; keepalive 64; keepalive_timeout 3s; }}\n"
        for i, path in enumerate(sockets)
    )
    mapped = "".join(f"        {topic} w{owner};\n" for topic, owner in owners.items())
    temps = "".join(
        f"{kind}_temp_path {tmp}/{kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    {temps}
    client_body_buffer_size 1m;
    client_max_body_size 16m;
    keepalive_requests 1000000;
    {upstreams}
    map $uri $topic {{ "~^/v1/topics/(?<t>[^/]+)" $t; }}
    map $topic $owner {{
{mapped}        default w0;
    }}
    server {{
        listen {process.HOST}:{port};
        location / {{
            proxy_pass http://$owner;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_request_buffering off;
            proxy_buffering off;
        }}
    }}
}}
"""


@dataclass
class Proxy:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pids(self) -> list[int]:
        return [self.proc.pid]


@contextmanager
def proxy(
    name: str, tmp: Path, sockets: list[str], owners: dict[str, int]
) -> Iterator[Proxy | None]:
    """haproxy or nginx in the foreground on a free port, stopped by its PID; None if
    the binary is not installed."""
    binary = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}",) if os.path.exists(p)), None
    )
    if binary is None:
        yield None
        return
    port = process.free_port()
    work = tmp / name
    work.mkdir()
    conf = work / f"{name}.conf"
    if name == "haproxy":
        conf.write_text(haproxy_config(port, sockets))
        argv = [binary, "-db", "-f", str(conf)]
    else:
        conf.write_text(nginx_config(port, sockets, owners, work))
        argv = [binary, "-c", str(conf), "-p", str(work)]
    log = work / "out.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + PROXY_START_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {log.read_text()[-2000:]}")
            try:
                with socket_connect(port):
                    break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not listen: {log.read_text()[-2000:]}") from exc
                time.sleep(0.05)
        yield Proxy(name, port, proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def socket_connect(port: int) -> Iterator[None]:
    import socket

    with socket.create_connection((process.HOST, port), timeout=1):
        yield


# --- the load ----------------------------------------------------------------------------


@dataclass
class Route:
    """One way to the owner: where its connections come from, the topic, the pids whose
    CPU it costs. Each window opens its own connections (uvicorn closes one idle for 5 s,
    longer than the other routes' windows take)."""

    name: str
    port: int
    worker: int | None  # the worker the kernel must have given the connection; None: any
    topic: str
    pids: list[int]
    stay: bool = False  # a first request without a topic: the connection is never passed
    single_cpu: float = 0.0
    single_s: float = 0.0
    single_n: int = 0
    batch_cpu: float = 0.0
    batch_s: float = 0.0
    batch_n: int = 0
    rounds: list[tuple[float, float]] = field(default_factory=list)  # µs a send, a batch


async def closed_loop(conns: list[Connection], request: bytes, n: int, expect: int) -> int:
    """``n`` requests over ``conns``, one at a time each; messages stored."""
    left, stored = n, 0

    async def client(conn: Connection) -> None:
        nonlocal left, stored
        while left > 0:
            left -= 1
            reply = await conn.request(request, REQUEST_TIMEOUT_S)
            if reply.status != expect:
                raise RuntimeError(f"answered {reply.status}: {reply.body[:200]!r}")
            stored += reply.body.count(b'"status":201') if expect == 200 else 1

    await asyncio.gather(*(client(c) for c in conns))
    return stored


async def connections(route: Route, workers: dict[int, int], n: int) -> list[Connection]:
    """``n`` keep-alive connections to the route's port (the kernel handed each to the
    route's worker, if it has one; the others are closed)."""
    found: list[Connection] = []
    opened = 0
    while len(found) < n and opened < MAX_OPENED:
        conn = await Connection.open(process.HOST, route.port)
        opened += 1
        assert conn._transport is not None
        client_port = conn._transport.get_extra_info("sockname")[1]
        if route.worker is None or accepted_by(client_port, route.port, workers) == route.worker:
            found.append(conn)
        else:
            conn.close()
    if len(found) < n:
        raise RuntimeError(f"only {len(found)} of {opened} connections on worker {route.worker}")
    return found


async def window(
    route: Route, workers: dict[int, int], request: bytes, n: int, conns: int, expect: int
) -> tuple[int, float, float]:
    """(messages stored, seconds, CPU seconds) of ``n`` requests from fresh connections,
    each of which sent one request first (not counted: the proxy's upstream connection)."""
    opened = await connections(route, workers, conns)
    try:
        if route.stay:
            await closed_loop(opened, HEALTH, conns, 200)
        await closed_loop(opened, request, conns, expect)
        before, t0 = cpu(route.pids), time.perf_counter()
        stored = await closed_loop(opened, request, n, expect)
        return stored, time.perf_counter() - t0, cpu(route.pids) - before
    finally:
        for conn in opened:
            conn.close()


async def measure(
    port: int,
    supervisor: int,
    proxies: list[Proxy] | None = None,
    rounds: int = ROUNDS,
    sends: int = SENDS_PER_ROUND,
    batches: int = BATCHES_PER_ROUND,
) -> list[Route]:
    workers = process.workers_of(supervisor)
    server_pids = [supervisor, *workers.values()]
    owned, other = topic_of(0, 2), topic_of(1, 2)
    routes = [
        Route("direct", port, 0, owned, server_pids),
        Route("passed", port, 0, other, server_pids),
        Route("hop", port, 0, other, server_pids, stay=True),
    ]
    routes += [Route(p.name, p.port, None, other, server_pids + p.pids) for p in proxies or []]
    body = loader.batch_body([{"body": batch.BODY, "delay_ms": batch.DELAY_MS}] * 1000)

    def requests(route: Route) -> tuple[bytes, bytes]:
        path = f"/v1/topics/{route.topic}/messages"
        return (
            build_request("POST", process.HOST, path, MESSAGE),
            build_request("POST", process.HOST, path + "/batch", body),
        )

    for route in routes:  # warm-up: every path
        single, many = requests(route)
        await window(route, workers, single, min(500, sends), CONNECTIONS, 201)
        await window(route, workers, many, 2, BATCH_CONNECTIONS, 200)
    for r in range(rounds):
        for route in routes[r % len(routes) :] + routes[: r % len(routes)]:
            single, many = requests(route)
            n, secs, cpu_s = await window(route, workers, single, sends, CONNECTIONS, 201)
            route.single_n, route.single_s = route.single_n + n, route.single_s + secs
            route.single_cpu += cpu_s
            m, secs, cpu_m = await window(route, workers, many, batches, BATCH_CONNECTIONS, 200)
            route.batch_n, route.batch_s = route.batch_n + m, route.batch_s + secs
            route.batch_cpu += cpu_m
            route.rounds.append((cpu_s / n * 1e6, cpu_m / m * 1e9))
    return routes


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="rocktimer-hop-") as tmp:
        env = {"ROCKTIMER_WORKERS": "2", "ROCKTIMER_PARTITIONS": "2"}
        (Path(tmp) / "srv").mkdir()
        with process.service(Path(tmp) / "srv", env) as srv, ExitStack() as stack:
            data = process.data_dir(Path(tmp) / "srv")
            sockets = [str(data / f"w{i}.sock") for i in range(2)]
            owners = {topic_of(k, 2): k for k in range(2)}
            proxies, missing = [], []
            for name in ("haproxy", "nginx"):
                front = stack.enter_context(proxy(name, Path(tmp), sockets, owners))
                (proxies.append(front) if front else missing.append(name))
            got = run(lambda: measure(srv.port, srv.pid, proxies))
    print(
        f"{ROUNDS} rounds x ({SENDS_PER_ROUND} single sends from {CONNECTIONS} connections, "
        f"{BATCHES_PER_ROUND} batches of 1000 from {BATCH_CONNECTIONS})"
        + (f"; not installed: {', '.join(missing)}" if missing else "")
    )
    print(table(got))


def table(got: list[Route]) -> str:
    """Each route's CPU a single send and a batch, its rates, and the extra over direct."""
    base = got[0]
    base_send = base.single_cpu / base.single_n * 1e6
    base_batch = base.batch_cpu / base.batch_n * 1e9
    lines = [
        "| route | CPU a single send | sends/s | CPU a batch of 1000 | msg/s |",
        "|---|---|---|---|---|",
    ]
    for route in got:
        send_us = route.single_cpu / route.single_n * 1e6
        batch_us = route.batch_cpu / route.batch_n * 1e9
        extra = "" if route is base else f" ({send_us - base_send:+.0f})"
        extra_b = "" if route is base else f" ({batch_us - base_batch:+.0f})"
        lines.append(
            f"| {route.name} | {send_us:.0f} µs{extra} | {route.single_n / route.single_s:,.0f} "
            f"| {batch_us:,.0f} µs{extra_b} | {route.batch_n / route.batch_s:,.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
