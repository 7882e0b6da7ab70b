"""Batch sends over several topics: one process (ROCKTIMER_WORKERS=1) against two worker
processes on two partitions (ROCKTIMER_WORKERS=2), both up at once, in alternating rounds.

Four keep-alive connections each send figure 2's batch of 1000 one-hour timers to a topic
of their own, back to back, for WINDOW_BATCHES batches a connection; two of the topics
belong to partition 0, two to partition 1, so with two workers each worker owns the
topics of two connections (and relays whatever the kernel handed it for the others).
Each round loads one server, then the other (order alternating); messages stored per
second and the CPU of each server's whole process tree (workers, sealer children) a
message, over the rounds.

    python -m bench.workers
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import tempfile
import time
import zlib
from pathlib import Path

from bench import batch, loader
from bench.client import run
from tests.support import process

ROUNDS = int(os.environ.get("BENCH_WORKERS_ROUNDS", "8"))
WINDOW_BATCHES = int(os.environ.get("BENCH_WORKERS_BATCHES", "10"))  # a connection, a round
TOPICS = 4


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


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and all its descendants alive now."""
    total = 0.0
    try:
        total += process.cpu_seconds(pid)
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (FileNotFoundError, ProcessLookupError):
        return total
    return total + sum(tree_cpu(int(c)) for c in children)


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
                concurrency=1,
                deadline_s=batch.RUN_TIMEOUT_S,
            )
            for name in names
        )
    )
    return sum(s.stored for s in done), time.monotonic() - started


def compare(rounds: int = ROUNDS, batches: int = WINDOW_BATCHES) -> dict[str, list[float]]:
    """Per side: [messages, seconds, cpu seconds, round rates...]."""
    names = topics()
    envs = {
        "1 worker": {"ROCKTIMER_WORKERS": "1"},
        "2 workers": {"ROCKTIMER_WORKERS": "2", "ROCKTIMER_PARTITIONS": "2"},
    }
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-workers-") as tmp:
        servers = {}
        try:
            for side, env in envs.items():
                work = Path(tmp) / side.replace(" ", "-")
                work.mkdir()
                servers[side] = process.service(work, env).start()
            for srv in servers.values():
                run(lambda srv=srv: window(srv.port, names, 2))  # type: ignore[misc]
            out: dict[str, list[float]] = {side: [0, 0, 0] for side in servers}
            order = list(servers)
            for r in range(rounds):
                for side in order if r % 2 == 0 else reversed(order):
                    srv = servers[side]
                    cpu = tree_cpu(srv.pid)
                    sent, secs = run(lambda srv=srv: window(srv.port, names, batches))  # type: ignore[misc]
                    out[side][0] += sent
                    out[side][1] += secs
                    out[side][2] += tree_cpu(srv.pid) - cpu
                    out[side].append(sent / secs)
            return out
        finally:
            for srv in servers.values():
                srv.stop()


def main() -> None:
    out = compare()
    print(f"{ROUNDS} rounds, {TOPICS} topics x {WINDOW_BATCHES} batches of 1000 a round")
    for side, (sent, secs, cpu, *_) in out.items():
        print(f"{side:>9}: {sent / secs:9,.0f} msg/s, server CPU {cpu / sent * 1e6:5.1f} µs a msg")
    one, two = out["1 worker"], out["2 workers"]
    per_round = [b / a for a, b in zip(one[3:], two[3:], strict=True)]
    overall = (two[0] / two[1]) / (one[0] / one[1])
    print(
        f"2 workers / 1: {overall:.2f} overall, {statistics.median(per_round):.2f} median "
        f"of {len(per_round)} rounds (min {min(per_round):.2f}, max {max(per_round):.2f})"
    )


if __name__ == "__main__":
    main()
