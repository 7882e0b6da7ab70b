"""Batch sends over several topics: one process (ROCKTIMER_WORKERS=1) against two worker
processes on two partitions (ROCKTIMER_WORKERS=2), both up at once, in alternating rounds.

Four topics, each loaded as figure 2 loads its one: two keep-alive connections sending
batches of 1000 one-hour timers back to back (one request is parsed while the other waits
for its fsync), WINDOW_BATCHES batches a topic; two of the topics belong to partition 0,
two to partition 1, so with two workers each owns two topics (and relays whatever the
kernel handed it for the others). Each round loads one server, then the other (order
alternating); messages stored per second, the CPU of each server's whole process tree
(workers, sealer children) a message, and the cores each side's server and this client
used over their windows: a server that is not given its cores (a shared machine) reads
below its scaling, and one worker idle while the other works would show there.

Idle memory, both started on an empty data dir and left IDLE_S: PSS (/proc/<pid>/smaps_rollup)
summed over each server's processes — the supervisor and the workers, whose pages forked
from the supervisor are shared (PSS counts a shared page once over its sharers).

Idle memory alone (``idle``): IDLE_ROUNDS rounds, each starting both servers on new data
dirs (which first alternating), measuring both after IDLE_S and stopping them.

    python -m bench.workers
    python -m bench.workers idle
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from bench import batch, loader
from bench.client import run
from tests.support import process

ROUNDS = int(os.environ.get("BENCH_WORKERS_ROUNDS", "8"))
WINDOW_BATCHES = int(os.environ.get("BENCH_WORKERS_BATCHES", "20"))  # a topic, a round
TOPICS = 4
IDLE_S = 3.0
IDLE_ROUNDS = int(os.environ.get("BENCH_WORKERS_IDLE_ROUNDS", "6"))


def topics() -> list[str]:
    """Two topics of partition 0 and two of partition 1 (of 2)."""
    found: dict[int, list[str]] = {0: [], 1: []}
    for i in itertools.count():
        name = f"bench-{i}"
        part = found[zlib.crc32(name.encode()) % 2]
        if len(part) < TOPICS // 2:
            part.append(name)
        if all(len(p) == TOPICS // 2 for p in found.values()):
            return found[0] + found[1]
    raise AssertionError("unreachable")


def pss_kib(pid: int) -> int:
    """Proportional set size of a process and its descendants: each shared page counted
    once over the processes sharing it."""
    total = 0
    for each in process.tree(pid):
        try:
            rollup = Path(f"/proc/{each}/smaps_rollup").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += next(
            int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")
        )
    return total


async def window(port: int, names: list[str], batches: int) -> tuple[int, float]:
    """Every topic loaded by its own connection at once: (messages stored, seconds)."""
    body = loader.batch_body([{"body": batch.BODY, "delay_ms": batch.DELAY_MS}] * 1000)
    started = time.monotonic()
    done = await asyncio.gather(
        *(
            loader.send_batches(
                process.HOST,
                port,
                name,
                itertools.repeat(body, batches),
                concurrency=loader.BATCH_CONCURRENCY,
                deadline_s=batch.RUN_TIMEOUT_S,
            )
            for name in names
        )
    )
    return sum(s.stored for s in done), time.monotonic() - started


@dataclass
class Side:
    sent: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0  # the server's, all its processes
    client_s: float = 0.0  # this process's, over the same windows
    pss_kib: int = 0  # idle, before the load
    rates: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.sent / self.seconds


ENVS = {
    "1 worker": {"ROCKTIMER_WORKERS": "1"},
    "2 workers": {"ROCKTIMER_WORKERS": "2", "ROCKTIMER_PARTITIONS": "2"},
}


def compare(rounds: int = ROUNDS, batches: int = WINDOW_BATCHES) -> dict[str, Side]:
    names = topics()
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-workers-") as tmp:
        servers = {}
        try:
            for side, env in ENVS.items():
                work = Path(tmp) / side.replace(" ", "-")
                work.mkdir()
                servers[side] = process.service(work, env).start()
            time.sleep(IDLE_S)
            out = {side: Side(pss_kib=pss_kib(srv.pid)) for side, srv in servers.items()}
            for srv in servers.values():
                run(lambda srv=srv: window(srv.port, names, 2))  # type: ignore[misc]
            order = list(servers)
            for r in range(rounds):
                for side in order if r % 2 == 0 else reversed(order):
                    srv, got = servers[side], out[side]
                    cpu, mine = process.tree_cpu_seconds(srv.pid), time.process_time()
                    sent, secs = run(lambda srv=srv: window(srv.port, names, batches))  # type: ignore[misc]
                    got.sent += sent
                    got.seconds += secs
                    got.cpu_s += process.tree_cpu_seconds(srv.pid) - cpu
                    got.client_s += time.process_time() - mine
                    got.rates.append(sent / secs)
            return out
        finally:
            for srv in servers.values():
                srv.stop()


def idle(rounds: int = IDLE_ROUNDS) -> dict[str, list[int]]:
    """Each side's idle PSS (KiB) a round, both started afresh each round."""
    out: dict[str, list[int]] = {side: [] for side in ENVS}
    for r in range(rounds):
        order = list(ENVS) if r % 2 == 0 else list(reversed(ENVS))
        with tempfile.TemporaryDirectory(prefix="rocktimer-bench-idle-") as tmp:
            servers = {}
            try:
                for side in order:
                    work = Path(tmp) / side.replace(" ", "-")
                    work.mkdir()
                    servers[side] = process.service(work, ENVS[side]).start()
                time.sleep(IDLE_S)
                for side, srv in servers.items():
                    out[side].append(pss_kib(srv.pid))
            finally:
                for srv in servers.values():
                    srv.stop()
    return out


def main_idle() -> None:
    out = idle()
    one, two = out["1 worker"], out["2 workers"]
    for side, got in out.items():
        print(f"{side:>9}: idle PSS " + ", ".join(f"{k / 1024:.1f}" for k in got) + " MiB")
    ratios = [b / a for a, b in zip(one, two, strict=True)]
    print(
        f"2 workers / 1, idle PSS: median {statistics.median(ratios):.3f} of {len(ratios)} "
        f"rounds (min {min(ratios):.3f}, max {max(ratios):.3f}); load average "
        + " ".join(f"{x:.1f}" for x in os.getloadavg())
    )


def main() -> None:
    if sys.argv[1:] == ["idle"]:
        main_idle()
        return
    out = compare()
    print(f"{ROUNDS} rounds, {TOPICS} topics x {WINDOW_BATCHES} batches of 1000 a round")
    for side, got in out.items():
        print(
            f"{side:>9}: {got.rate:9,.0f} msg/s, server CPU {got.cpu_s / got.sent * 1e6:5.1f} µs "
            f"a msg, server {got.cpu_s / got.seconds:.2f} cores, client "
            f"{got.client_s / got.seconds:.2f}; idle PSS {got.pss_kib / 1024:.1f} MiB"
        )
    one, two = out["1 worker"], out["2 workers"]
    per_round = [b / a for a, b in zip(one.rates, two.rates, strict=True)]
    print(
        f"2 workers / 1: {two.rate / one.rate:.2f} overall, {statistics.median(per_round):.2f} "
        f"median of {len(per_round)} rounds (min {min(per_round):.2f}, max {max(per_round):.2f}); "
        f"idle PSS {two.pss_kib / one.pss_kib:.2f}"
    )


if __name__ == "__main__":
    main()
