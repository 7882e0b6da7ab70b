"""Figure 6: the Redis alternative — a sorted-set delay queue, measured in the same run.

The classic Redis delay queue: ``ZADD queue <due_ms> <member>`` schedules, and a poller
runs a Lua script in a tight loop that takes up to 1000 members with a score <= now and
removes them (``ZRANGEBYSCORE`` + ``ZREM``, atomic) — those have fired. redis-server
(Debian's package) runs as a child process on 127.0.0.1, a random port and a temp dir,
with durability equal to the service's: ``--appendonly yes --appendfsync always`` (every
write in the AOF and fsynced before its reply; one fsync per event-loop turn, so
pipelined writes are group-committed as ours are). RDB snapshots are off. The client is
redis-py's asyncio client (hiredis parser and packer when installed). Each phase gets a
fresh redis-server, as each of our figures gets a fresh service.

Against figures 2, 3 and 4 of the same run, at the same sizes:

- schedule: ``batches`` pipelines of 1000 ZADDs (one message each: a 1 h due time, the
  member ``id:due:body`` with figure 2's 128-byte body) from 2 connections; members/s.
- lateness: 5,000 timers/s falling due for ``seconds`` (5 per ms), loaded ahead; the
  poller's (b) lateness is the client's clock when the script's reply arrived minus the
  due time (as figure 3's consumer), its (a) lateness the script's own ``TIME`` minus the
  due time, whole ms (as figure 3's server stamp).
- storm: N members with one due time, loaded ahead; from that instant the poller pops
  1000 at a time: drain rate = N / (the reply that emptied the set - the due instant).
  Every member must come back exactly once.

Ratios are rocktimer / Redis: > 1 means rocktimer is faster (throughput), and for
lateness p99 < 1 means rocktimer is more punctual.

    python -m bench.redis_alt
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from bench import batch, lateness, loader, rawdb, report, scale, storm
from bench.client import run
from bench.stats import Spread, spread
from tests.support import process

if TYPE_CHECKING:
    from redis.asyncio import Redis

T = TypeVar("T")

NOT_INSTALLED = "redis: not installed (apt-get install redis-server)"
NO_CLIENT = "redis: Python client not installed (.venv/bin/pip install -e '.[test]')"
KEY = "delayed"
POP_LIMIT = 1_000  # members per poll, as the deliverer's chunks
CONNECTIONS = loader.BATCH_CONCURRENCY  # schedule pipelines in flight, as figure 2
SCHEDULE_DELAY_MS = 3_600_000  # figure 2's 1 h
BODY = rawdb.BODY.decode()  # figure 2's and 4's 128-byte body
TIMEOUT_S = 30.0  # one Redis call
DRAIN_GRACE_S = 10.0  # after the last due time: how long stragglers may take
STORM_TIMEOUT_S = 300.0
LOAD_TIMEOUT_S = 600.0

# Fire what is due: the script reads Redis's clock, so "now" is the server's, as ours.
# Numbers are formatted with %d: Lua would otherwise pass 1.7e+12 to ZRANGEBYSCORE.
POP_DUE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now),
                       'LIMIT', 0, tonumber(ARGV[1]))
if #due > 0 then
  redis.call('ZREM', KEYS[1], unpack(due))
end
return {string.format('%d', now), due}
"""


@dataclass(slots=True)
class Ours:
    """rocktimer's figures 2-4 from the same run (measured here when not given)."""

    batch: batch.BatchRun | None = None
    lateness: lateness.LatenessRun | None = None
    storm: storm.StormRun | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    n: int
    rate: float
    cpu: str


@dataclass(frozen=True, slots=True)
class Lateness:
    to_pop: Spread  # (a) Redis TIME at the pop - due, whole ms
    to_receiver: Spread  # (b) client clock at the reply - due
    expected: int
    received: int
    polls: int
    cpu: str


@dataclass(frozen=True, slots=True)
class Storm:
    n: int
    drain_s: float
    distinct: int
    left: int  # ZCARD after the drain
    peak_rss_kib: int
    cpu: str

    @property
    def rate(self) -> float:
        return self.n / self.drain_s if self.drain_s > 0 else float("inf")


@dataclass(frozen=True, slots=True)
class RedisRun:
    version: str
    schedule: Schedule
    lateness: Lateness
    storm: Storm


@dataclass(slots=True)
class _Popped:
    members: list[bytes] = field(default_factory=list)
    polls: int = 0


# --- Redis side -----------------------------------------------------------------------------


def _connect(port: int) -> Redis:
    from redis.asyncio import Redis

    return Redis(host=process.HOST, port=port, socket_timeout=TIMEOUT_S, decode_responses=False)


def member(i: int, due_ms: int) -> bytes:
    return f"{i}:{due_ms}:{BODY}".encode()


def due_of(m: bytes) -> int:
    return int(m.split(b":", 2)[1])


async def zadd_batches(r: Redis, batches: list[list[tuple[bytes, int]]]) -> tuple[int, float]:
    """Pipeline each batch of (member, score) ZADDs from CONNECTIONS tasks; (added, seconds)."""
    pending = iter(batches)
    added = 0

    async def worker() -> None:
        nonlocal added
        for items in pending:
            pipe = r.pipeline(transaction=False)
            for m, score in items:
                pipe.zadd(KEY, {m: score})
            replies = await pipe.execute()
            added += sum(int(x) for x in replies)

    started = time.monotonic()
    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(CONNECTIONS))), LOAD_TIMEOUT_S)
    return added, time.monotonic() - started


async def poll_until(
    r: Redis,
    *,
    expected: int,
    timeout_s: float,
    on_reply: Callable[[int, list[bytes], int], None],
) -> _Popped:
    """The poller: run POP_DUE back to back until ``expected`` members came or time is up.

    ``on_reply(redis_now_ms, members, client_wall_ns)`` sees every non-empty reply.
    """
    script = r.register_script(POP_DUE)
    popped = _Popped()
    deadline = time.monotonic() + timeout_s
    while len(popped.members) < expected and time.monotonic() < deadline:
        reply = await script(keys=[KEY], args=[POP_LIMIT])
        got_ns = time.time_ns()
        popped.polls += 1
        now_ms, members = int(reply[0]), list(reply[1])
        if members:
            popped.members += members
            on_reply(now_ms, members, got_ns)
    return popped


def _lead_ms(n: int, rate: float) -> int:
    """Schedule ahead by twice the time the load should take at the measured rate."""
    return loader.LEAD_MARGIN_MS + int(n * 2_000 / max(rate, loader.LOAD_RATE_FLOOR))


async def schedule_phase(port: int, pid: int, batches: int) -> Schedule:
    due = loader.now_ms() + SCHEDULE_DELAY_MS
    work = [
        [(member(b * loader.BATCH_SIZE + i, due), due) for i in range(loader.BATCH_SIZE)]
        for b in range(batches)
    ]
    r = _connect(port)
    try:
        await zadd_batches(r, work[:5])  # warm-up, as figure 2's
        with process.CpuMeter(pid) as cpu:
            added, seconds = await zadd_batches(r, work[5:])
    finally:
        await r.aclose()
    return Schedule(added, added / seconds if seconds > 0 else 0.0, cpu.describe())


async def lateness_phase(
    port: int, pid: int, *, rate: int, seconds: float, load_rate: float
) -> Lateness:
    n = int(rate * seconds)
    first_due = loader.now_ms() + _lead_ms(n, load_rate)
    dues = lateness.due_times(first_due, n, rate)
    work = [
        [(member(i, d), d) for i, d in enumerate(dues[s : s + loader.BATCH_SIZE], start=s)]
        for s in range(0, n, loader.BATCH_SIZE)
    ]
    r = _connect(port)
    to_pop: list[float] = []
    to_receiver: list[float] = []

    def record(now_ms: int, members: list[bytes], got_ns: int) -> None:
        got_ms = got_ns / 1e6
        for m in members:
            due = due_of(m)
            to_pop.append(now_ms - due)
            to_receiver.append(got_ms - due)

    try:
        added, _ = await zadd_batches(r, work)
        if added != n or loader.now_ms() >= first_due:
            raise RuntimeError(f"redis: loaded {added} of {n}, or past the first due time")
        meter = process.CpuMeter(pid)

        async def window() -> None:  # CPU over the due window only, as figure 3
            await asyncio.sleep((first_due - loader.now_ms()) / 1e3)
            with meter:
                await asyncio.sleep(seconds)

        meter_task = asyncio.create_task(window())
        timeout_s = (dues[-1] - loader.now_ms()) / 1e3 + DRAIN_GRACE_S
        popped = await poll_until(r, expected=n, timeout_s=timeout_s, on_reply=record)
        await meter_task
    finally:
        await r.aclose()
    return Lateness(
        spread(to_pop), spread(to_receiver), n, len(popped.members), popped.polls, meter.describe()
    )


async def storm_phase(server: process.ServerProcess, n: int, load_rate: float) -> Storm:
    due = loader.now_ms() + _lead_ms(n, load_rate)
    work = [
        [(member(i, due), due) for i in range(s, min(n, s + loader.BATCH_SIZE))]
        for s in range(0, n, loader.BATCH_SIZE)
    ]
    r = _connect(server.port)
    last_ns = 0

    def record(_: int, __: list[bytes], got_ns: int) -> None:
        nonlocal last_ns
        last_ns = got_ns

    try:
        with process.RssSampler(server.pid) as rss:
            added, _ = await zadd_batches(r, work)
            del work
            if added != n or loader.now_ms() >= due:
                raise RuntimeError(f"redis: loaded {added} of {n}, or past the due time")
            await asyncio.sleep(max(0.0, (due - loader.now_ms()) / 1e3))
            with process.CpuMeter(server.pid) as cpu:
                popped = await poll_until(r, expected=n, timeout_s=STORM_TIMEOUT_S, on_reply=record)
        left = int(await r.zcard(KEY))
    finally:
        await r.aclose()
    return Storm(
        n,
        max(0.0, last_ns / 1e9 - due / 1e3),
        len(set(popped.members)),
        left,
        rss.peak_kib,
        cpu.describe(),
    )


def _version(binary: str) -> str:
    out = subprocess.run(
        [binary, "--version"], check=False, capture_output=True, text=True, timeout=10
    )
    words = out.stdout.split()
    return next((w[2:] for w in words if w.startswith("v=")), "unknown")


def _in_fresh_redis(
    binary: str, body: Callable[[process.ServerProcess], Coroutine[Any, Any, T]]
) -> T:
    """Run one phase against a fresh redis-server (own temp dir), stopped after it."""
    with (
        tempfile.TemporaryDirectory(prefix="rocktimer-bench-redis-") as tmp,
        process.RedisServer(binary, Path(tmp)) as server,
    ):
        return run(lambda: body(server))


def measure_lateness(binary: str, *, rate: int, seconds: float, load_rate: float) -> Lateness:
    """The poller's lateness phase alone, on a fresh redis-server (figures 6 and 17)."""
    return _in_fresh_redis(
        binary,
        lambda s: lateness_phase(s.port, s.pid, rate=rate, seconds=seconds, load_rate=load_rate),
    )


def measure_redis(binary: str, *, batches: int, seconds: float, storm_n: int) -> RedisRun:
    sched = _in_fresh_redis(binary, lambda s: schedule_phase(s.port, s.pid, batches))
    late = measure_lateness(binary, rate=lateness.RATE_PER_S, seconds=seconds, load_rate=sched.rate)
    burst = _in_fresh_redis(binary, lambda s: storm_phase(s, storm_n, sched.rate))
    return RedisRun(_version(binary), sched, late, burst)


# --- the figure -----------------------------------------------------------------------------


def unavailable() -> str | None:
    """Why the Redis side cannot run here, or None when it can."""
    if process.redis_server_binary() is None:
        return NOT_INSTALLED
    try:
        import redis.asyncio  # noqa: F401
    except ImportError:
        return NO_CLIENT
    return None


def _skipped(reason: str) -> list[report.Row]:
    return [
        report.Row(
            "6", "Redis sorted-set delay queue (ZADD + Lua poller)", reason, "-", "-", "-", None
        )
    ]


def run_figure(
    *, batches: int, seconds: float, storm_n: int, ours: Ours | None = None
) -> list[report.Row]:
    reason = unavailable()
    if reason is not None:
        return _skipped(reason)
    binary = process.redis_server_binary()
    assert binary is not None
    ours = ours or Ours()
    if ours.batch is None:
        ours.batch = batch.measure(batches=batches)
    if ours.lateness is None:
        ours.lateness = lateness.measure(seconds=seconds)
    if ours.storm is None:
        ours.storm = storm.measure(n=storm_n)
    theirs = measure_redis(binary, batches=batches, seconds=seconds, storm_n=storm_n)
    return rows(ours, theirs)


def rows(ours: Ours, theirs: RedisRun) -> list[report.Row]:
    assert ours.batch is not None
    assert ours.lateness is not None
    assert ours.storm is not None
    redis = f"Redis {theirs.version}"
    sched, late, burst = theirs.schedule, theirs.lateness, theirs.storm
    our_late = ours.lateness.result
    complete = late.received == late.expected
    p99_ratio = (
        f"p99 x{our_late.to_consumer.p99 / late.to_receiver.p99:.2f} Redis"
        if late.to_receiver.p99 > 0
        else "n/a"
    )
    storm_ok = burst.distinct == burst.n and burst.left == 0
    return [
        report.Row(
            "6",
            f"vs Redis: schedule, {loader.BATCH_SIZE}/batch, durable, {CONNECTIONS} connections",
            f"rocktimer batch send {ours.batch.stats.rate:,.0f} msg/s (fig 2)",
            f"{redis} ZADD pipelined {sched.rate:,.0f} msg/s",
            report.ratio(ours.batch.stats.rate, sched.rate),
            "-",
            None,
            f"{sched.n:,} ZADDs, AOF fsync always; redis {sched.cpu}",
        ),
        report.Row(
            "6",
            f"vs Redis: lateness due -> receiver, {lateness.RATE_PER_S:,} timers/s "
            f"for {ours.lateness.seconds:.0f} s",
            f"rocktimer {our_late.to_consumer.ms(1)} (fig 3 b)",
            f"{redis} Lua poller {late.to_receiver.ms(1)}",
            p99_ratio,
            "-",
            None if complete else False,
            f"(a) due -> fired: rocktimer {our_late.to_log.ms(0)}, Redis {late.to_pop.ms(0)}; "
            f"{late.received:,}/{late.expected:,} popped in {late.polls:,} polls; "
            f"redis {late.cpu}",
        ),
        report.Row(
            "6",
            f"vs Redis: storm of {burst.n:,} due at one instant, drain rate",
            f"rocktimer {ours.storm.rate:,.0f} timers/s (fig 4)",
            f"{redis} Lua poller {burst.rate:,.0f} members/s ({burst.drain_s:.2f} s)",
            report.ratio(ours.storm.rate, burst.rate),
            "-",
            None if storm_ok else False,
            f"{burst.distinct:,} distinct popped, {burst.left} left; redis peak RSS "
            f"{burst.peak_rss_kib / 1024:,.0f} MiB (rocktimer "
            f"{ours.storm.peak_rss_kib / 1024:,.0f} MiB); redis {burst.cpu}",
        ),
    ]


def main() -> None:
    s = scale.current()
    rows_ = run_figure(batches=s.batches, seconds=s.lateness_seconds, storm_n=s.storm_n)
    print(report.table(rows_, s.name))


if __name__ == "__main__":
    main()
