"""Figure 10: on time under load — timers falling due while producers and consumers
saturate the server.

5,000 timers/s fall due for ``seconds`` (figure 3's schedule, loaded ahead, read by figure
3's long-polling consumer) while

(a) a producer sends batches as fast as the server accepts them: ``PRODUCERS`` keep-alive
    connections, each POSTing 1000 one-hour timers (server-made msg_ids) back to back, and
    honouring Retry-After when it is answered 429;
(b) ``CONSUMERS`` consumers receive 100 + ack 100 as fast as they can, from a topic
    preloaded with messages due now (figure 5's consume loop);
(c) both at once.

Each load is also run alone (timers alone, producer alone, consumers alone), on the same
window length: the figure is each load beside its solo self. Every phase gets a fresh
server and data dir, so none inherits another's store. The producer and consumers start
``LOAD_LEAD_S`` before the first timer is due, so the server is saturated by then, and
only what completes inside the window (first due time to last) counts as throughput.

With BENCH_ONTIME_WORKERS=2 every phase's server runs 2 worker processes on 2 partitions,
and the timers' topic belongs to one worker, the producer's and the consumers' to the
other: the figure then says what partitions buy a timer topic whose worker is not the
one saturated. The same run then also measures figure 6's Redis Lua poller on the same
schedule (a fresh redis-server, where installed): due -> consumer beside it.

    python -m bench.ontime
    BENCH_ONTIME_WORKERS=2 python -m bench.ontime
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
import zlib
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench import lateness, loader, receive, redis_alt, report, scale, stalls
from bench.client import Connection, HttpError, Response, build_request, run
from bench.stats import Spread, spread
from tests.support import process

PRODUCERS = 4  # batch sends in flight, as in the measurement
CONSUMERS = 4  # consumers on one group, as figure 5
PRODUCE_TOPIC = "produce"
PRODUCE_DELAY_MS = 3_600_000  # never due during the run: the producer adds no deliveries
WORK_TOPIC = receive.CONSUME_TOPIC
LOAD_LEAD_S = 1.0  # the loads run this long before the window, to be saturating by then
CONSUME_RATE_CEILING = 60_000  # msg/s: the solo consumers' preload outlasts the window
PRELOAD_MARGIN = 1.5  # the loaded phases preload the solo rate x window x this
HTTP_TIMEOUT_S = 30.0
TARGET_P99_MS = 10.0
TARGET_MAX_MS = 50.0
TARGET_RATIO = 0.8  # a load's throughput under the timers, against itself alone
WORKERS = int(os.environ.get("BENCH_ONTIME_WORKERS", "1"))

_201 = b'"status":201'


@dataclass(frozen=True, slots=True)
class Plan:
    name: str
    timers: bool
    producer: bool
    consumers: bool


SOLO_CONSUMERS = Plan("consumers alone", False, False, True)
SOLO_PRODUCER = Plan("producer alone", False, True, False)
SOLO_TIMERS = Plan("timers alone", True, False, False)
LOADED = (
    Plan("(a) + producer", True, True, False),
    Plan("(b) + consumers", True, False, True),
    Plan("(c) + producer + consumers", True, True, True),
)


@dataclass(slots=True)
class Throughput:
    """Messages a load got done inside the window (201s sent, or acked)."""

    done: int = 0
    refused: int = 0  # 429 answers (a whole batch refused)
    drained: bool = False  # the consumers ran out of preloaded messages early

    def rate(self, seconds: float) -> float:
        return self.done / seconds if seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Window:
    start: float  # wall clock, s
    end: float

    def holds(self, response: Response) -> bool:
        return self.start <= response.done_wall_ns / 1e9 <= self.end


@dataclass(frozen=True, slots=True)
class PhaseResult:
    plan: Plan
    seconds: float
    to_log: Spread  # no samples: no timers in this phase
    to_consumer: Spread
    timers_expected: int
    timers_received: int
    produced: Throughput
    consumed: Throughput
    cpu: str

    @property
    def complete(self) -> bool:
        return self.timers_received == self.timers_expected


async def produce(port: int, window: Window, got: Throughput) -> None:
    """Batch sends back to back until the window ends; a 429 waits its Retry-After."""
    body = loader.batch_body(
        [{"body": lateness.BODY, "delay_ms": PRODUCE_DELAY_MS}] * loader.BATCH_SIZE
    )
    path = f"/v1/topics/{PRODUCE_TOPIC}/messages/batch"
    request = build_request("POST", f"{process.HOST}:{port}", path, body)
    conn = await Connection.open(process.HOST, port)
    try:
        while (left := window.end - time.time()) > 0:
            r = await conn.request(request, HTTP_TIMEOUT_S)
            if r.status == 429:
                got.refused += 1
                await asyncio.sleep(min(r.retry_after_s, left))
            elif r.status != 200:
                raise HttpError(f"batch send: {r.status} {r.body[:300]!r}")
            elif window.holds(r):
                got.done += r.body.count(_201)
    finally:
        conn.close()


async def consume(port: int, window: Window, got: Throughput) -> None:
    """Receive 100 + ack 100 until the window ends (or the preloaded topic is empty)."""
    authority = f"{process.HOST}:{port}"
    base = f"/v1/topics/{WORK_TOPIC}/groups/{receive.GROUP}"
    take = build_request(
        "POST",
        authority,
        f"{base}/receive",
        json={"max_messages": receive.PER_CALL, "wait_ms": 0, "invisible_ms": receive.INVISIBLE_MS},
    )
    conn = await Connection.open(process.HOST, port)
    try:
        while time.time() < window.end:
            r = await conn.request(take, HTTP_TIMEOUT_S)
            if r.status != 200:
                raise HttpError(f"receive: {r.status} {r.body[:300]!r}")
            receipts = [m["receipt"] for m in r.json()["messages"]]
            if not receipts:
                got.drained = True
                return
            body = orjson.dumps({"receipts": receipts})
            r = await conn.request(
                build_request("POST", authority, f"{base}/ack", body), HTTP_TIMEOUT_S
            )
            if r.status != 200:
                raise HttpError(f"ack: {r.status} {r.body[:300]!r}")
            if window.holds(r):
                got.done += r.body.count(b'"acked"')
    finally:
        conn.close()


async def drive(
    port: int, pid: int, plan: Plan, *, seconds: float, rate: int, preload: int
) -> PhaseResult:
    if plan.consumers:
        await receive.preload(port, WORK_TOPIC, preload)
    dues: list[int] = []
    if plan.timers:
        dues, _ = await lateness.load_schedule(port, rate=rate, seconds=seconds)
        start = dues[0] / 1e3
    else:
        start = time.time() + LOAD_LEAD_S
    window = Window(start, start + seconds)
    produced, consumed = Throughput(), Throughput()
    recorder = lateness.Recorder()
    meter = process.CpuMeter(pid, tree=True)

    async def loads() -> None:
        await asyncio.sleep(max(0.0, window.start - LOAD_LEAD_S - time.time()))
        work: list[Awaitable[None]] = []
        if plan.producer:
            work += [produce(port, window, produced) for _ in range(PRODUCERS)]
        if plan.consumers:
            work += [consume(port, window, consumed) for _ in range(CONSUMERS)]
        await asyncio.gather(*work)

    async def metered() -> None:  # CPU over the window only
        await asyncio.sleep(max(0.0, window.start - time.time()))
        with meter:
            await asyncio.sleep(seconds)

    with process.Profile(pid, f"ontime-{plan.name.split()[0].strip('()')}"):
        jobs: list[Awaitable[object]] = [loads(), metered()]
        if dues:
            jobs.append(recorder.consume(port, dues))
        await asyncio.gather(*jobs)
    return PhaseResult(
        plan,
        seconds,
        spread(recorder.to_log),
        spread(recorder.to_consumer),
        len(dues),
        len(recorder.to_log),
        produced,
        consumed,
        meter.describe(),
    )


def server_env(workers: int) -> dict[str, str]:
    """The server's settings for ``workers`` processes: as many partitions, the timers'
    topic owned by another worker than the producer's and the consumers' topics."""
    if workers == 1:
        return {}
    timers = zlib.crc32(lateness.TOPIC.encode()) % workers
    loads = {zlib.crc32(t.encode()) % workers for t in (PRODUCE_TOPIC, WORK_TOPIC)}
    if timers in loads:
        raise SystemExit(
            f"bench.ontime: with {workers} workers the timers' topic {lateness.TOPIC!r} shares "
            f"a worker with {PRODUCE_TOPIC!r} or {WORK_TOPIC!r}; pick other names"
        )
    return {"ROCKTIMER_WORKERS": str(workers), "ROCKTIMER_PARTITIONS": str(workers)}


def phase(
    plan: Plan, *, seconds: float, rate: int, preload: int, workers: int = WORKERS
) -> PhaseResult:
    """One plan on a fresh server and data dir."""
    print(f"[bench] figure 10: {plan.name} ...", file=sys.stderr, flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="rocktimer-bench-ontime-") as tmp,
        process.service(Path(tmp), server_env(workers)) as service,
    ):
        return run(
            lambda: drive(
                service.port, service.pid, plan, seconds=seconds, rate=rate, preload=preload
            )
        )


@dataclass(frozen=True, slots=True)
class OnTimeRun:
    timers: PhaseResult
    producer: PhaseResult
    consumers: PhaseResult
    loaded: tuple[PhaseResult, ...]  # (a), (b), (c)
    workers: int = 1
    redis: redis_alt.Lateness | None = None  # the Lua poller on the same schedule, same run


def measure(
    *,
    seconds: float,
    rate: int = lateness.RATE_PER_S,
    consume_ceiling: int = CONSUME_RATE_CEILING,
    workers: int = WORKERS,
) -> OnTimeRun:
    """``consume_ceiling``: msg/s the solo consumers could reach (sizes their preload)."""
    solo_preload = int(consume_ceiling * (seconds + LOAD_LEAD_S))

    def measured(plan: Plan, preload: int) -> PhaseResult:
        return phase(plan, seconds=seconds, rate=rate, preload=preload, workers=workers)

    consumers = measured(SOLO_CONSUMERS, solo_preload)
    rate_alone = consumers.consumed.rate(seconds)
    preload = max(1, int(rate_alone * (seconds + LOAD_LEAD_S) * PRELOAD_MARGIN))
    producer = measured(SOLO_PRODUCER, 0)
    timers = measured(SOLO_TIMERS, 0)
    loaded = tuple(measured(plan, preload) for plan in LOADED)
    redis = None
    if workers > 1 and (binary := process.redis_server_binary()) and not redis_alt.unavailable():
        print("[bench] figure 10: Redis Lua poller ...", file=sys.stderr, flush=True)
        redis = redis_alt.measure_lateness(
            binary, rate=rate, seconds=seconds, load_rate=loader.LOAD_RATE_FLOOR
        )
    return OnTimeRun(timers, producer, consumers, loaded, workers, redis)


def _p99_ratio(measured: Spread, alone: Spread) -> str:
    return f"p99 x{measured.p99 / alone.p99:.1f} alone" if alone.p99 > 0 else "n/a"


def _lateness_rows(run_: OnTimeRun, rate: int) -> list[report.Row]:
    rows = []
    alone = run_.timers
    for result in run_.loaded:
        counts = f"{result.timers_received:,}/{result.timers_expected:,} received; {result.cpu}"
        title = f"{rate:,} timers/s due for {result.seconds:.0f} s {result.plan.name}"
        log_ok = result.to_log.p99 <= TARGET_P99_MS and result.to_log.max <= TARGET_MAX_MS
        rows += [
            report.Row(
                "10",
                f"lateness due -> topic log, {title}",
                result.to_log.ms(0),
                f"timers alone {alone.to_log.ms(0)}",
                _p99_ratio(result.to_log, alone.to_log),
                f"p99 <= {TARGET_P99_MS:.0f} ms, max <= {TARGET_MAX_MS:.0f} ms",
                log_ok and result.complete,
                counts,
            ),
            report.Row(
                "10",
                f"lateness due -> long-polling consumer, {title}",
                result.to_consumer.ms(1),
                f"timers alone {alone.to_consumer.ms(1)}",
                _p99_ratio(result.to_consumer, alone.to_consumer),
                "-",
                None if result.complete else False,
                counts,
            ),
        ]
    return rows


def _rate_row(
    who: str,
    result: PhaseResult,
    alone: PhaseResult,
    got: Throughput,
    solo: Throughput,
    rate: int,
) -> report.Row:
    seconds = result.seconds
    targeted = result.plan in (LOADED[0], LOADED[1])  # (a) for the producer, (b) consumers
    notes = [result.cpu]
    for label, t in (("", got), ("alone: ", solo)):
        if t.refused:
            notes.append(f"{label}{t.refused:,} batches answered 429")
        if t.drained:
            notes.append(f"{label}ran out of preloaded messages")
    ratio = got.rate(seconds) / solo.rate(seconds) if solo.done else 0.0
    return report.Row(
        "10",
        f"{who} throughput, {result.plan.name} ({rate:,} timers/s due)",
        f"{got.rate(seconds):,.0f} msg/s",
        f"{alone.plan.name} {solo.rate(seconds):,.0f} msg/s",
        report.ratio(got.rate(seconds), solo.rate(seconds)),
        f">= {TARGET_RATIO:.1f}x alone" if targeted else "-",
        (ratio >= TARGET_RATIO) if targeted else None,
        "; ".join(notes),
    )


def _redis_rows(run_: OnTimeRun, rate: int) -> list[report.Row]:
    """Due -> consumer with the load on the other worker, beside the Redis poller's."""
    redis = run_.redis
    if redis is None:
        return []
    rows = []
    for result in (run_.timers, *run_.loaded[:2]):
        mine = result.to_consumer
        rows.append(
            report.Row(
                "10",
                f"due -> long-polling consumer, {run_.workers} workers, the load on the other "
                f"one: {result.plan.name}",
                mine.ms(1),
                f"Redis Lua poller (b) {redis.to_receiver.ms(1)}",
                f"p99 x{mine.p99 / redis.to_receiver.p99:.1f} Redis"
                if redis.to_receiver.p99 > 0
                else "n/a",
                "p99 <= Redis's",
                mine.p99 <= redis.to_receiver.p99 and result.complete,
                f"Redis {redis.received:,}/{redis.expected:,} received; {redis.cpu}",
            )
        )
    return rows


def rows(run_: OnTimeRun, rate: int = lateness.RATE_PER_S) -> list[report.Row]:
    a, b, c = run_.loaded
    producer, consumers = run_.producer, run_.consumers
    return [
        *_lateness_rows(run_, rate),
        *_redis_rows(run_, rate),
        _rate_row("producer", a, producer, a.produced, producer.produced, rate),
        _rate_row("producer", c, producer, c.produced, producer.produced, rate),
        _rate_row("consumers", b, consumers, b.consumed, consumers.consumed, rate),
        _rate_row("consumers", c, consumers, c.consumed, consumers.consumed, rate),
    ]


def run_figure(
    *, seconds: float, rate: int = lateness.RATE_PER_S, consume_ceiling: int = CONSUME_RATE_CEILING
) -> list[report.Row]:
    ontime = rows(measure(seconds=seconds, rate=rate, consume_ceiling=consume_ceiling), rate)
    return [*ontime, stalls.measured_row("10", seconds)]


def main() -> None:
    s = scale.current()
    print(report.table(run_figure(seconds=s.ontime_seconds), s.name))


if __name__ == "__main__":
    main()
