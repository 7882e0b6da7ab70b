"""Figure 19: the server's CPU a message delivered and acked, beside a batch send's.

Rounds on one server (or on two builds, both up at once), alternating their order:

- **stream**: figure 18's workload. ``rate`` timers/s falling due for ``seconds``, loaded
  ahead by batch sends, consumed by one stream (``max_in_flight`` 1000) whose receipts
  are acked, whatever gathered, on a second connection;
- **poll**: the same schedule consumed by figure 3's long-polling consumer (receive up to
  1000, ``wait_ms`` 1000, acks on a second connection);
- **batch**: batch sends of 1000 one-hour timers (figure 2's), as many messages as a
  delivery round.

A delivery round's CPU is the server's (every process of it: /proc utime + stime) from
the first due time until every message was delivered and acked; the load ahead of it is
not counted. Its CPU a message beside the batch send's of the same round is the ratio
(goal: <= 3). Each delivery round also gives due -> consumer lateness, and the CPU of
each of the server's threads over the round (by the names py-spy reports; RocksDB's own
threads by their kernel names): the breakdown by stage. With BENCH_PYSPY_DIR set, each
delivery round is also profiled (``py-spy record``, tests/support/process.py).

    python -m bench.deliver                        # this tree, ROCKTIMER_WORKERS=1
    python -m bench.deliver --redis                # and the Redis poller's lateness after
    python -m bench.deliver ../main .              # two trees, rounds alternating
    python -m bench.deliver --env ROCKTIMER_WORKERS=2
    python -m bench.deliver . . --env-b ROCKTIMER_MOVE_PACE_MS=5   # one build, two settings
    python -m bench.deliver --rates 2500,5000,10000,20000 --rounds 2   # a message / a batch
    python -m bench.deliver --in-process --rounds 2 # each step's CPU on one thread, 200 rounds a k
    python -m bench.deliver --floor                 # a round's store writes, fsync, hand-offs

``--in-process``: no server, no HTTP, no thread hand-off but the syncer's: an Engine on a
temp dir and a fake clock, and one thread that plays the scanner (scan, move, the parked
receive served in the move's batch, its commit: Deliverer.move_here), the consumer's ack
and its next long poll, round after round, ``k`` timers falling due a round, for several
``k``, their rounds interleaved with each other and with batch sends of 1000 in the same
process (the baseline); each step's CPU is that thread's own (``time.thread_time``), the
other threads' (the syncer's fsyncs and replies) is the process's rest. What a step costs
a message and a round comes out of the least squares over the ``k``: a split that moves
less with a busy machine than the server figure does (no HTTP client competing with the
server, no wake-up that waits behind other jobs, a change of load falls on every ``k``
alike).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench import batch, consumer, deliver_floor, lateness, loader, redis_alt, report, stream
from bench.client import Client, run
from bench.stats import Spread, spread
from storage import keys
from storage.records import MessageRecord
from storage.store import CF
from tests.support import process
from workers.clock import FakeClock
from workers.engine import Engine, EngineConfig
from workers.scanner import Chunk

RATE_PER_S = lateness.RATE_PER_S
SECONDS = 4.0  # a delivery round's due window
ROUNDS = 3
KINDS = ("stream", "poll")
GOAL_RATIO = 3.0  # CPU a message delivered and acked <= this x a batch send's
TOPIC_PREFIX = "deliver-"
# The server's own counts over a delivery round (/metrics, summed over its workers): what
# a message costs in writer batches (rocktimer_commits: every batch, a look that found
# nothing and wrote nothing included) and fsyncs, the fixed costs the CPU is spent on.
COUNTERS = {"batches": "rocktimer_commits_total", "fsyncs": "rocktimer_wal_fsync_seconds_count"}


async def counters(port: int) -> Counter[str]:
    client = Client(process.HOST, port)
    try:
        body = (await client.call("GET", "/metrics")).body.decode()
    finally:
        client.close()
    out: Counter[str] = Counter()
    for line in body.splitlines():
        for name, metric in COUNTERS.items():
            if line.startswith(metric) and line[len(metric)] in " {":
                out[name] += int(float(line.rsplit(" ", 1)[1]))
    return out


# --- CPU of a server: every process, every thread -------------------------------------------


def server_pids(pid: int) -> list[int]:
    """The server and, when partitioned (ROCKTIMER_WORKERS > 1), its workers."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return [pid, *map(int, children)]


def cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += process.cpu_seconds(pid)
    return total


def thread_cpu(pids: list[int]) -> dict[tuple[int, int], tuple[float, int]]:
    """(pid, tid) -> CPU seconds and voluntary context switches (the times it went to
    sleep: a wait for work, for a lock or for the GIL) of each thread of these processes."""
    out = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError, StopIteration, ValueError):
                    fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                    status = (task / "status").read_text().splitlines()
                    switches = next(
                        int(line.split()[1])
                        for line in status
                        if line.startswith("voluntary_ctxt_switches:")
                    )
                    cpu = (int(fields[11]) + int(fields[12])) / process.CLOCK_TICKS
                    out[pid, int(task.name)] = (cpu, switches)
    return out


_DUMP_THREAD = re.compile(r'^Thread (0x[0-9A-Fa-f]+|\d+) \([^)]*\): "([^"]*)"', re.M)


def thread_names(pids: list[int]) -> dict[tuple[int, int], str]:
    """(pid, tid) -> a name: Python threads by their own name (``py-spy dump``, which
    shows native thread ids), the others by the kernel's (RocksDB's ``rocksdb:low`` …)."""
    names: dict[tuple[int, int], str] = {}
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    names[pid, int(task.name)] = (task / "comm").read_text().strip()
        if not Path(spy).exists():
            continue
        try:
            dump = subprocess.run(
                [spy, "dump", "--pid", str(pid), "--nonblocking"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            ).stdout
        except subprocess.TimeoutExpired:
            continue
        for tid, name in _DUMP_THREAD.findall(dump):
            key = (pid, int(tid, 16) if tid.startswith("0x") else int(tid))
            if key in names:
                names[key] = name
    return names


def _stage(name: str) -> str:
    """A thread's stage: rocktimer's by name, RocksDB's (and the rest) pooled."""
    if name == "MainThread":
        return "event loop (HTTP, streams, inline ops)"
    if name.startswith("rocktimer-"):
        return name.removeprefix("rocktimer-")
    if name.startswith("rocksdb"):
        return "rocksdb background"
    return "other"


# --- rounds ------------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    """One side's sums over its rounds of one kind."""

    messages: int = 0
    cpu_s: float = 0.0
    rounds: int = 0
    late: list[float] = field(default_factory=list)  # due -> consumer, ms
    stages: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # CPU s
    incomplete: int = 0  # rounds where not every message was delivered and acked
    counters: Counter[str] = field(default_factory=Counter)  # COUNTERS over the rounds
    sleeps: Counter[str] = field(default_factory=Counter)  # voluntary context switches a stage

    @property
    def us_per_msg(self) -> float:
        return self.cpu_s / self.messages * 1e6 if self.messages else float("nan")


@dataclass(slots=True)
class Side:
    name: str
    server: process.AppProcess
    tallies: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    ratios: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    names: dict[tuple[int, int], str] = field(default_factory=dict)

    @property
    def pids(self) -> list[int]:
        return server_pids(self.server.pid)


async def _batch_window(port: int, n: int) -> int:
    body = loader.batch_body([{"body": batch.BODY, "delay_ms": batch.DELAY_MS}] * 1000)
    stats = await loader.send_batches(
        process.HOST,
        port,
        batch.TOPIC,
        itertools.repeat(body, max(1, n // 1000)),
        deadline_s=batch.RUN_TIMEOUT_S,
    )
    return stats.stored


async def _stream_window(
    port: int, topic: str, dues: list[int], meter: Callable[[], Any]
) -> tuple[list[float], int]:
    """Stream the schedule, ack everything: due -> client of each first delivery, acked."""
    client = Client(process.HOST, port)
    acker = stream.Acker(client)
    arrivals = stream.Arrivals(len(dues), acker)
    acks = asyncio.create_task(acker.run())
    ev = await stream.EventStream.open(port, stream.stream_path(topic), arrivals.on_messages)
    try:
        await asyncio.sleep(max(0.0, (dues[0] - loader.now_ms()) / 1e3))
        with meter():
            deadline = time.monotonic() + (dues[-1] - loader.now_ms()) / 1e3 + 10
            while acker.acked < len(dues) and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
    finally:
        ev.close()
        acks.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await acks
        client.close()
    return arrivals.to_client, acker.acked


async def _poll_window(
    port: int, topic: str, dues: list[int], meter: Callable[[], Any]
) -> tuple[list[float], int]:
    """Long-poll the schedule, ack everything: due -> client of each first delivery, acked."""
    recorder = lateness.Recorder()
    with meter():
        got = await consumer.consume(
            process.HOST,
            port,
            topic,
            stream.GROUP,
            expected=len(dues),
            timeout_s=(dues[-1] - loader.now_ms()) / 1e3 + lateness.DRAIN_GRACE_S,
            on_batch=recorder.record,
        )
    return recorder.to_consumer, got.acked


class _Meter:
    """CPU of the server's processes and threads over the span it is entered for."""

    def __init__(self, side: Side) -> None:
        self.side = side
        self.cpu_s = 0.0
        self.threads: dict[tuple[int, int], tuple[float, int]] = {}

    def __call__(self) -> _Meter:
        return self

    def __enter__(self) -> _Meter:
        self._pids = self.side.pids
        self._cpu = cpu_of(self._pids)
        self._threads = thread_cpu(self._pids)
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu_s = cpu_of(self._pids) - self._cpu
        after = thread_cpu(self._pids)
        self.threads = {
            k: (cpu - self._threads.get(k, (0.0, 0))[0], sw - self._threads.get(k, (0.0, 0))[1])
            for k, (cpu, sw) in after.items()
        }


def _delivery_round(side: Side, kind: str, round_no: int, *, rate: int, seconds: float) -> None:
    port, pid = side.server.port, side.server.pid
    topic = f"{TOPIC_PREFIX}{kind}-{round_no}"
    meter = _Meter(side)

    async def body() -> tuple[list[float], int]:
        dues, _ = await lateness.load_schedule(port, rate=rate, seconds=seconds, topic=topic)
        process.wait_idle(pid, timeout_s=3.0)  # the load's flushes are not the round's
        window = _stream_window if kind == "stream" else _poll_window
        before = await counters(port)
        with process.Profile(pid, f"deliver-{side.name}-{kind}-{round_no}"):
            got = await window(port, topic, dues, meter)
        tally.counters.update((await counters(port)) - before)
        return got

    tally = side.tallies[kind]
    late, acked = run(body)
    n = int(rate * seconds)
    tally.rounds += 1
    tally.messages += n
    tally.cpu_s += meter.cpu_s
    tally.late += late
    tally.incomplete += int(acked < n or len(late) < n)
    if not side.names:
        side.names = thread_names(side.pids)
    for key, (cpu, switches) in meter.threads.items():
        stage = _stage(side.names.get(key, "other"))
        tally.stages[stage] += cpu
        tally.sleeps[stage] += switches


def _batch_round(side: Side, n: int) -> float:
    pids = side.pids
    before = cpu_of(pids)
    stored = run(lambda: _batch_window(side.server.port, n))
    cpu = cpu_of(pids) - before
    tally = side.tallies["batch"]
    tally.rounds += 1
    tally.messages += stored
    tally.cpu_s += cpu
    return cpu / stored * 1e6 if stored else float("nan")


ROLL_WAL_BODY = "w" * 1000  # --roll-wal's messages: ~1.2 KB of WAL each
ROLL_WAL_MESSAGES = 400_000  # ~500 MB: the WAL passes max_total_wal_size a few times


async def _roll_wal(port: int) -> int:
    """Write what makes a fresh server roll its WAL a few times, as one that has run for
    a while has (a WAL file written over, storage/store.py's RECYCLED_WALS, only comes
    after a roll): one-hour timers, 1 KB bodies."""
    body = loader.batch_body([{"body": ROLL_WAL_BODY, "delay_ms": batch.DELAY_MS}] * 1000)
    stats = await loader.send_batches(
        process.HOST,
        port,
        "deliver-roll-wal",
        itertools.repeat(body, ROLL_WAL_MESSAGES // 1000),
        deadline_s=batch.RUN_TIMEOUT_S,
    )
    return stats.stored


def measure(
    sides: list[Side],
    *,
    rounds: int,
    rate: int,
    seconds: float,
    kinds: tuple[str, ...],
    roll_wal: bool = False,
) -> None:
    """Each round: on each side (order alternating), a batch window then each delivery
    kind (order alternating too); each delivery round's µs a message ÷ the batch's.
    ``roll_wal``: each server rolls its WAL first (_roll_wal)."""
    n = int(rate * seconds)
    for side in sides:  # warm-up: first writes, first validations
        if roll_wal:
            print(f"[deliver] rolling the WAL of {side.name}", file=sys.stderr, flush=True)
            run(partial(_roll_wal, side.server.port))
            process.wait_idle(side.server.pid, timeout_s=30.0)  # its flushes
            wals = sorted(side.server.data_dir.rglob("*.log"))
            print(
                f"[deliver] {side.name}: WAL files "
                + ", ".join(f"{p.name} {p.stat().st_size / 2**20:.1f} MiB" for p in wals),
                file=sys.stderr,
                flush=True,
            )
        run(partial(_batch_window, side.server.port, 5_000))
    for r in range(rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for side in order:
            print(f"[deliver] round {r + 1}/{rounds} {side.name}", file=sys.stderr, flush=True)
            per_batch = _batch_round(side, n)
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                tally = side.tallies[kind]
                cpu_before, msgs_before = tally.cpu_s, tally.messages
                _delivery_round(side, kind, r, rate=rate, seconds=seconds)
                per = (tally.cpu_s - cpu_before) / (tally.messages - msgs_before) * 1e6
                if per_batch > 0:  # (CPU time comes in ticks: a tiny batch may read 0)
                    side.ratios[kind].append(per / per_batch)


# --- report ------------------------------------------------------------------------------


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def summary(sides: list[Side], redis: redis_alt.Lateness | str | None) -> list[str]:
    lines = []
    for side in sides:
        b = side.tallies["batch"]
        lines.append(f"{side.name}: batch send {b.us_per_msg:.1f} µs CPU a message")
        for kind in KINDS:
            if kind not in side.tallies:
                continue
            t = side.tallies[kind]
            ratios = side.ratios[kind]
            late: Spread = spread(t.late)
            med = statistics.median(ratios) if ratios else float("nan")
            lines.append(
                f"  {kind}: {t.us_per_msg:.1f} µs CPU a message delivered+acked = "
                f"x{_ratio(t.us_per_msg, b.us_per_msg):.2f} batch send (median round x{med:.2f}, "
                f"goal <= {GOAL_RATIO:.0f}); due -> consumer {late.ms(1)}"
                + (f"; {t.incomplete} rounds incomplete" if t.incomplete else "")
            )
            total = sum(t.stages.values()) or 1.0
            parts = ", ".join(
                f"{stage} {cpu / t.messages * 1e6:.1f} µs ({cpu / total:.0%})"
                for stage, cpu in sorted(t.stages.items(), key=lambda kv: -kv[1])
                if cpu / total >= 0.01
            )
            lines.append(f"    by thread, µs a message: {parts}")
            per = ", ".join(
                f"{name} {t.counters[name] / t.messages:.3f} a message "
                f"({t.messages / t.counters[name]:.1f} messages each)"
                for name in COUNTERS
                if t.counters[name]
            )
            lines.append(f"    the server's counts: {per}")
            sleeps = ", ".join(
                f"{stage} {n / t.messages:.2f}"
                for stage, n in t.sleeps.most_common()
                if n / t.messages >= 0.01
            )
            total_sleeps = sum(t.sleeps.values()) / t.messages
            lines.append(
                f"    threads going to sleep (a wait, a hand-off), a message: {total_sleeps:.2f}"
                f" ({sleeps})"
            )
    if len(sides) == 2:
        first, second = sides
        for kind in ("batch", *KINDS):
            if kind in first.tallies and kind in second.tallies:
                ratio = _ratio(second.tallies[kind].us_per_msg, first.tallies[kind].us_per_msg)
                lines.append(f"{kind}: CPU a message {second.name} ÷ {first.name} {ratio:.2f}")
    if isinstance(redis, str):
        lines.append(f"Redis Lua poller: {redis}")
    elif redis is not None:
        lines.append(f"Redis Lua poller, same schedule: due -> receiver {redis.to_receiver.ms(1)}")
    return lines


def rows(sides: list[Side], redis: redis_alt.Lateness | str | None) -> list[report.Row]:
    side = sides[-1]
    b = side.tallies["batch"]
    out = []
    for kind in KINDS:
        if kind not in side.tallies:
            continue
        t = side.tallies[kind]
        ratio = _ratio(t.us_per_msg, b.us_per_msg)
        out.append(
            report.Row(
                "19",
                f"server CPU a message delivered and acked ({kind}), {RATE_PER_S:,} timers/s",
                f"{t.us_per_msg:.1f} µs",
                f"batch send of 1000: {b.us_per_msg:.1f} µs a message",
                f"x{ratio:.2f}",
                f"<= {GOAL_RATIO:.0f} x",
                ratio <= GOAL_RATIO and not t.incomplete,
                f"due -> consumer {spread(t.late).ms(1)}; {t.rounds} rounds"
                + (
                    ""
                    if redis is None or isinstance(redis, str)
                    else f"; Redis poller {redis.to_receiver.ms(1)}"
                ),
            )
        )
    return out


def split_cost(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least squares through (writer batches a message, µs of CPU a message) points: the
    part a message and the part a batch (µs), or None without two distinct batch rates.
    Rounds at different rates carry different messages a batch (a move every MOVE_PACE_MS
    whatever the rate): what stays is what each message costs, the slope what each batch
    (a move, an ack, a look, with their hand-offs, pushes and requests) costs."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n if n else 0.0
    mean_y = sum(y for _, y in points) / n if n else 0.0
    var = sum((x - mean_x) ** 2 for x, _ in points)
    if n < 2 or var <= 0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var
    return mean_y - slope * mean_x, slope


def by_rate(sides_by_rate: dict[int, list[Side]]) -> list[str]:
    """Each side's and kind's CPU a message at each rate, and its split (split_cost)."""
    lines = []
    names = [side.name for side in next(iter(sides_by_rate.values()))]
    for i, name in enumerate(names):
        for kind in KINDS:
            points = []
            for rate, sides in sorted(sides_by_rate.items()):
                t = sides[i].tallies.get(kind)
                if t is None or not t.messages or not t.counters["batches"]:
                    continue
                points.append((t.counters["batches"] / t.messages, t.us_per_msg))
                b = sides[i].tallies["batch"].us_per_msg
                lines.append(
                    f"{name} {kind} at {rate:,}/s: {t.us_per_msg:.1f} µs a message "
                    f"(x{_ratio(t.us_per_msg, b):.2f} batch send), "
                    f"{points[-1][0]:.3f} batches a message"
                )
            split = split_cost(points)
            if split is not None:
                lines.append(
                    f"{name} {kind}: CPU a message ~ {split[0]:.1f} µs + {split[1]:.0f} µs "
                    "a writer batch (least squares over the rates)"
                )
    return lines


def _redis(rate: int, seconds: float) -> redis_alt.Lateness | str:
    binary, why_not = process.redis_server_binary(), redis_alt.unavailable()
    if binary is None or why_not is not None:
        return why_not or redis_alt.NOT_INSTALLED
    return redis_alt.measure_lateness(
        binary, rate=rate, seconds=seconds, load_rate=loader.LOAD_RATE_FLOOR
    )


def compare(
    trees: list[Path],
    env: dict[str, str],
    *,
    rounds: int,
    rate: int,
    seconds: float,
    kinds: tuple[str, ...],
    env_b: dict[str, str] | None = None,
    roll_wal: bool = False,
) -> list[Side]:
    """One side a tree (two: both up at once); ``env_b``: the second side's settings on
    top of ``env`` (one tree given twice: one build under two settings)."""
    root = process.ROOT
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-deliver-") as tmp:
        sides: list[Side] = []
        try:
            try:
                for i, tree in enumerate(trees):
                    process.ROOT = tree.resolve()
                    work = Path(tmp) / str(i)
                    work.mkdir()
                    name = str(tree) if len(trees) > 1 else "server"
                    own = {**env, **(env_b or {})} if i == 1 else env
                    if i == 1 and env_b:
                        name += " " + " ".join(f"{k}={v}" for k, v in env_b.items())
                    sides.append(Side(name, process.service(work, own).start()))
            finally:
                process.ROOT = root
            measure(
                sides, rounds=rounds, rate=rate, seconds=seconds, kinds=kinds, roll_wal=roll_wal
            )
        finally:
            for side in sides:
                side.server.stop()
    return sides


def run_figure(*, seconds: float = SECONDS, rounds: int = ROUNDS) -> list[report.Row]:
    sides = compare(
        [process.ROOT], {}, rounds=rounds, rate=RATE_PER_S, seconds=seconds, kinds=KINDS
    )
    return rows(sides, _redis(RATE_PER_S, seconds))


# --- in process: each step's CPU on one thread --------------------------------------------

IN_PROCESS_SIZES = (2, 5, 10, 25, 50, 100)  # timers due a round (a move, its receive, its ack)
IN_PROCESS_ROUNDS = 200
IN_PROCESS_STEPS = ("move", "ack", "park", "other threads")
PACE_MS = 2  # the fake clock's step a round (the scanner's MOVE_PACE_MS)
SEND_EVERY = 10  # rounds of deliveries a batch send of 1000 (the baseline) is made


@dataclass(slots=True)
class Steps:
    """CPU µs a round of ``size`` messages, by step (IN_PROCESS_STEPS)."""

    size: int
    us: dict[str, float]
    wal: str = ""  # "recycled": the engine's WAL was a recycled file (deliver_floor.roll_wal)

    @property
    def total(self) -> float:
        return sum(self.us.values())


def _in_process_record(msg_id: str, due_ms: int) -> MessageRecord:
    return MessageRecord("t", msg_id, due_ms, 0, lateness.BODY.encode())


class _Deliveries:
    """One engine (writer and syncer started; this thread is its scanner and its consumer)
    whose timers fall due ``size`` a round, and the CPU of each step over its rounds.
    ``rolled``: its WAL is a recycled file (deliver_floor.roll_wal)."""

    def __init__(self, data_dir: str, size: int, *, rolled: bool = False) -> None:
        self.size = size
        self.rolled = rolled
        self.clock = FakeClock()
        self.engine = Engine(EngineConfig(data_dir=data_dir), self.clock)
        if rolled:
            deliver_floor.roll_wal(self.engine.store)
        self.engine.writer.start()
        self.cursor = b""
        self.cpu = dict.fromkeys(IN_PROCESS_STEPS, 0.0)
        self.rounds = 0

    async def load(self, rounds: int) -> None:
        first = self.clock.now_ms() + 10_000
        recs = [
            _in_process_record(f"m{i}", first + i // self.size * PACE_MS)
            for i in range(self.size * rounds)
        ]
        for i in range(0, len(recs), 1000):
            await self.engine.send_batch(recs[i : i + 1000])
        self.clock.advance(10_000 - PACE_MS)

    async def round(self) -> None:
        """A long poll parks; its timers fall due; the scanner's move serves it; it acks."""
        engine = self.engine
        process_before, started = time.process_time(), time.thread_time()
        waiting = asyncio.ensure_future(engine.receive("t", "g", 1000, 60_000, 30_000))
        await asyncio.sleep(0)  # its look finds nothing: it parks
        parked = time.thread_time()
        self.clock.advance(PACE_MS)
        bound = keys.due_bound(engine.writer.scan_horizon() + 1)
        found = Chunk(
            engine.store.scan(CF.TIMERS, self.cursor, bound, 2_000),
            engine.writer.cancels_committed,
        )
        self.cursor = bound
        if not engine.deliverer.move_here(found, lambda: False):
            raise RuntimeError("the in-process move did not happen")
        got = await waiting
        moved = time.thread_time()
        if len(got) != self.size:
            raise RuntimeError(f"the move served {len(got)} of {self.size} messages")
        acked = await engine.ack("t", "g", [one.receipt for one in got])
        if acked != ["acked"] * self.size:
            raise RuntimeError(f"the ack answered {acked}")
        done = time.thread_time()
        self.cpu["park"] += parked - started
        self.cpu["move"] += moved - parked
        self.cpu["ack"] += done - moved
        self.cpu["other threads"] += (time.process_time() - process_before) - (done - started)
        self.rounds += 1

    def steps(self) -> Steps:
        us = {step: s / self.rounds * 1e6 for step, s in self.cpu.items()}
        return Steps(self.size, us, "recycled" if self.rolled else "")

    def close(self) -> None:
        self.engine.writer.stop()
        self.engine.store.close()


async def _in_process(
    tmp: str, sizes: tuple[int, ...], rounds: int, rolled: bool
) -> tuple[list[Steps], float]:
    sender = _Deliveries(f"{tmp}/send", 1)  # its engine takes batch sends only
    runs = [_Deliveries(f"{tmp}/steps-{size}", size) for size in sizes]
    if rolled:  # each size again, on an engine whose WAL is a recycled file
        runs += [_Deliveries(f"{tmp}/rolled-{size}", size, rolled=True) for size in sizes]
    try:
        for one in runs:
            await one.load(rounds)
        due = sender.clock.now_ms() + batch.DELAY_MS
        send_cpu, sent = 0.0, 0
        for r in range(rounds):
            for one in runs if r % 2 == 0 else runs[::-1]:
                await one.round()
            if r % SEND_EVERY == 0:  # a batch send of 1000 beside them, in the same minutes
                recs = [_in_process_record(f"b{r}-{i}", due) for i in range(1000)]
                before = time.process_time()
                await sender.engine.send_batch(recs)
                send_cpu += time.process_time() - before
                sent += len(recs)
        return [one.steps() for one in runs], send_cpu / sent * 1e6
    finally:
        for one in (sender, *runs):
            one.close()


def in_process(
    sizes: tuple[int, ...] = IN_PROCESS_SIZES,
    rounds: int = IN_PROCESS_ROUNDS,
    *,
    rolled: bool = False,
) -> tuple[list[Steps], float]:
    """Each size's Steps and a batch send's CPU a message (the process's: its fsyncs
    included), in interleaved rounds: a round of every size in turn (order alternating),
    a batch send of 1000 every SEND_EVERY of them, so that a change in the machine's load
    falls on all of them alike. On uvloop, as the server. ``rolled``: every size twice,
    the second time on an engine whose WAL is a recycled file (deliver_floor.roll_wal),
    interleaved."""
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-deliver-") as tmp:
        return run(partial(_in_process, tmp, sizes, rounds, rolled))


def in_process_lines(steps: list[Steps], send_us: float) -> list[str]:
    lines = [f"in process: a batch send of 1000 {send_us:.1f} µs CPU a message"]
    for wal in dict.fromkeys(s.wal for s in steps):  # each kind of engine, in order
        ours = [s for s in steps if s.wal == wal]
        if wal:
            lines.append(f" the WAL {wal}:")
        for s in ours:
            parts = ", ".join(f"{step} {us:.0f}" for step, us in s.us.items())
            lines.append(
                f"  {s.size} a round: {s.total:.0f} µs ({parts}); a message "
                f"{s.total / s.size:.1f} µs = x{_ratio(s.total / s.size, send_us):.1f} a batch send"
            )
        for step in (*IN_PROCESS_STEPS, "all"):
            points = [  # (batches a message, µs a message): one batch of each step a round
                (1 / s.size, (s.total if step == "all" else s.us[step]) / s.size) for s in ours
            ]
            split = split_cost(points)
            if split is not None:
                lines.append(f"  {step}: ~ {split[0]:.1f} µs a message + {split[1]:.0f} µs a round")
    return lines


def _env(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"bench.deliver: --env wants NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.deliver", description=__doc__.split("\n")[0]
    )
    parser.add_argument("trees", type=Path, nargs="*", help="zero (this tree), one or two trees")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument(
        "--env-b", action="append", default=[], metavar="NAME=VALUE", help="the second side's"
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--rate", type=int, default=RATE_PER_S)
    parser.add_argument(
        "--rates",
        default="",
        metavar="R1,R2,...",
        help="rounds at each rate in turn, then CPU a message split into a part a message "
        "and a part a writer batch",
    )
    parser.add_argument("--kinds", default=",".join(KINDS), help="stream,poll")
    parser.add_argument("--redis", action="store_true", help="the Redis poller's lateness after")
    parser.add_argument(
        "--roll-wal",
        action="store_true",
        help="each server first writes ~500 MB (one-hour timers), rolling its WAL as a server "
        "that has run for a while has; with --in-process, each size again on an engine "
        "whose WAL is a recycled file",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="no server: the floor of a round (its WriteBatches, the fsync, a thread "
        "hand-off on the real store) and the CPU a message it allows (bench/deliver_floor.py)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="no server: each step's CPU on one thread, a message and a round "
        "(--rounds x 100 rounds for each number of messages a round)",
    )
    args = parser.parse_args()
    if args.floor:
        print("\n".join(deliver_floor.lines(deliver_floor.measure(), GOAL_RATIO)))
        return
    if args.in_process:
        got = in_process(rounds=args.rounds * 100, rolled=args.roll_wal)
        print("\n".join(in_process_lines(*got)))
        return
    trees = args.trees or [process.ROOT]
    if len(trees) > 2:
        raise SystemExit("bench.deliver: at most two trees")
    for tree in trees:
        if not (tree / "app" / "__main__.py").is_file():
            raise SystemExit(f"bench.deliver: {tree} is not a rocktimer tree (no app/__main__.py)")
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if unknown := set(kinds) - set(KINDS):
        raise SystemExit(f"bench.deliver: --kinds: unknown {', '.join(sorted(unknown))}")
    if args.env_b and len(trees) != 2:
        raise SystemExit("bench.deliver: --env-b wants two trees (the same one twice is fine)")
    try:
        rates = [int(r) for r in args.rates.split(",") if r]
    except ValueError:
        raise SystemExit(f"bench.deliver: --rates wants integers, got {args.rates!r}") from None
    if any(r <= 0 for r in rates):
        raise SystemExit("bench.deliver: --rates: each rate must be > 0")
    if rates:
        sides_by_rate = {}
        for rate in rates:
            print(f"[deliver] rate {rate:,}/s", file=sys.stderr, flush=True)
            sides_by_rate[rate] = compare(
                trees,
                _env(args.env),
                rounds=args.rounds,
                rate=rate,
                seconds=args.seconds,
                kinds=kinds,
                env_b=_env(args.env_b),
                roll_wal=args.roll_wal,
            )
        print("\n".join(by_rate(sides_by_rate)))
        return
    sides = compare(
        trees,
        _env(args.env),
        rounds=args.rounds,
        rate=args.rate,
        seconds=args.seconds,
        kinds=kinds,
        env_b=_env(args.env_b),
        roll_wal=args.roll_wal,
    )
    redis = _redis(args.rate, args.seconds) if args.redis else None
    print("\n".join(summary(sides, redis)))


if __name__ == "__main__":
    main()
