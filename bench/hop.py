"""What the hop to a partition's owner costs: CPU per single send answered by the worker
that accepted the connection (direct) beside one it relays to the owner (forwarded).

One server, ROCKTIMER_WORKERS=2 and 2 partitions. The client opens keep-alive connections
until it holds CONNECTIONS accepted by worker 0 (which worker accepted a connection is
read from /proc: the server-side socket of the client's port, in which worker's fds).
Over those connections it sends figure 1's durable single send (a one-hour timer) in a
closed loop, alternately to a topic of partition 0 (worker 0 answers it: direct) and to
one of partition 1 (worker 0 relays it to worker 1 over its unix socket: forwarded),
ROUNDS rounds of SENDS_PER_ROUND sends each, the order alternating. CPU is both workers'
(and the supervisor's), from /proc, over each phase.

    python -m bench.hop
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import zlib
from pathlib import Path

from bench.client import Connection, build_request, run
from tests.support import process

CONNECTIONS = 8
ROUNDS = int(os.environ.get("BENCH_HOP_ROUNDS", "6"))
SENDS_PER_ROUND = int(os.environ.get("BENCH_HOP_SENDS", "3000"))
MESSAGE = b'{"body":"hello, rocktimer","delay_ms":3600000}'
REQUEST_TIMEOUT_S = 30.0
MAX_OPENED = 200  # connections tried before giving up on finding enough on worker 0


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


async def closed_loop(conns: list[Connection], request: bytes, n: int) -> None:
    left = n

    async def client(conn: Connection) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            reply = await conn.request(request, REQUEST_TIMEOUT_S)
            if reply.status != 201:
                raise RuntimeError(f"a send answered {reply.status}: {reply.body[:200]!r}")

    await asyncio.gather(*(client(c) for c in conns))


async def measure(
    port: int, supervisor: int, rounds: int = ROUNDS, sends: int = SENDS_PER_ROUND
) -> dict[str, tuple[float, float, float]]:
    """Per phase: (µs of all workers' CPU a send, of worker 0's, sends/s)."""
    pids = process.workers_of(supervisor)
    conns: list[Connection] = []
    opened: list[Connection] = []
    try:
        while len(conns) < CONNECTIONS and len(opened) < MAX_OPENED:
            conn = await Connection.open(process.HOST, port)
            opened.append(conn)
            assert conn._transport is not None
            client_port = conn._transport.get_extra_info("sockname")[1]
            if accepted_by(client_port, port, pids) == 0:
                conns.append(conn)
        if len(conns) < CONNECTIONS:
            raise RuntimeError(f"only {len(conns)} of {len(opened)} connections on worker 0")
        requests = {
            "direct": build_request(
                "POST", process.HOST, f"/v1/topics/{topic_of(0, 2)}/messages", MESSAGE
            ),
            "forwarded": build_request(
                "POST", process.HOST, f"/v1/topics/{topic_of(1, 2)}/messages", MESSAGE
            ),
        }
        for request in requests.values():  # warm-up: both paths, the relay's connections
            await closed_loop(conns, request, min(500, sends))
        all_pids = [supervisor, *pids.values()]
        totals = {name: [0.0, 0.0, 0.0] for name in requests}  # cpu all, cpu worker 0, s
        for r in range(rounds):
            order = list(requests) if r % 2 == 0 else list(reversed(requests))
            for name in order:
                before, before0, t0 = cpu(all_pids), cpu([pids[0]]), time.perf_counter()
                await closed_loop(conns, requests[name], sends)
                totals[name][2] += time.perf_counter() - t0
                totals[name][0] += cpu(all_pids) - before
                totals[name][1] += cpu([pids[0]]) - before0
        n = rounds * sends
        return {
            name: (all_s / n * 1e6, w0_s / n * 1e6, n / secs)
            for name, (all_s, w0_s, secs) in totals.items()
        }
    finally:
        for conn in opened:
            conn.close()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="rocktimer-hop-") as tmp:
        env = {"ROCKTIMER_WORKERS": "2", "ROCKTIMER_PARTITIONS": "2"}
        with process.service(Path(tmp), env) as srv:
            got = run(lambda: measure(srv.port, srv.pid))
    direct, forwarded = got["direct"], got["forwarded"]
    print(f"{ROUNDS} rounds x {SENDS_PER_ROUND} sends, {CONNECTIONS} connections on worker 0")
    for name, (all_us, w0_us, rate) in got.items():
        print(f"{name:>9}: {all_us:6.1f} µs CPU a send (worker 0: {w0_us:5.1f}), {rate:,.0f}/s")
    extra, ratio = forwarded[0] - direct[0], forwarded[0] / direct[0]
    print(f"the hop: +{extra:.1f} µs CPU a send ({ratio:.2f}x)")


if __name__ == "__main__":
    main()
