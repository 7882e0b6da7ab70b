"""Figure 3: lateness of a steady 5k timers/s falling due, and of their consumer.

Timers are scheduled ahead with batch sends, their deliver_at_ms spread evenly (5 per
millisecond), all falling due inside a window of ``seconds``. One long-polling consumer
(wait_ms=1000, max_messages=1000, acks in batches on a second connection) is polling when
the first falls due. From every first delivery it records:

(a) due -> topic log: ``delivered_at_ms - deliver_at_ms`` (server-stamped, whole ms);
(b) due -> consumer: the client's wall clock when the receive reply arrived, minus
    ``deliver_at_ms`` (same machine, same clock).

The floor, in the same run: a plain Python thread sleeping until each of the same due
times on this machine (no server), i.e. the wake-up precision any Python timer gets here.

    python -m bench.lateness
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import consumer, loader, report, scale, stalls
from bench.client import Response, run
from bench.stats import Spread, spread
from tests.support import process

RATE_PER_S = 5_000  # timers falling due per second, as the figure is defined
TOPIC = "lateness"
GROUP = "bench"
BODY = "x" * 100  # a small message
DRAIN_GRACE_S = 10.0  # after the last due time: how long stragglers may take to arrive
FLOOR_SECONDS = 5.0  # 25k wake-ups: a stable p99, short beside the service's window
TARGET_P99_MS = 10.0
# The floor loop again with this much work a timer: at 5,000 timers/s, a fifth and half of
# a core. On a VM that stalls, what a process can use of a core and stay on time.
FLOOR_WORK_US = (40.0, 100.0)


def due_times(start_ms: int, n: int, rate: int) -> list[int]:
    """``n`` deliver times from ``start_ms``, ``rate`` per second, spread evenly."""
    return [start_ms + i * 1_000 // rate for i in range(n)]


def timer_floor(rate: int, seconds: float, work_us: float = 0.0) -> Spread:
    """Lateness (ms) of a Python thread sleeping until each due time of the same schedule
    and doing ``work_us`` of fixed work (bench/stalls.py, ``spin``) per timer it finds due."""
    n = int(rate * seconds)
    units_per_timer = stalls.units_per_us() * work_us if work_us else 0.0
    dues = due_times(loader.now_ms() + 100, n, rate)
    late: list[float] = []
    i = 0
    while i < n:
        left = dues[i] / 1e3 - time.time()
        if left > 0:
            time.sleep(left)
        woke = time.time_ns() / 1e6
        found = i
        while i < n and dues[i] <= woke:  # every timer due by now
            late.append(woke - dues[i])
            i += 1
        if units_per_timer:
            stalls.spin(int(units_per_timer * (i - found)))
    return spread(late)


@dataclass(frozen=True, slots=True)
class Lateness:
    to_log: Spread  # (a)
    to_consumer: Spread  # (b)
    expected: int
    received: int
    redelivered: int
    load_rate: float
    cpu: str


async def load_schedule(
    port: int, *, rate: int, seconds: float, topic: str = TOPIC
) -> tuple[list[int], loader.LoadStats]:
    """Batch-send ``rate`` x ``seconds`` timers due evenly from a lead ahead: their due
    times, and how the load went."""
    n = int(rate * seconds)
    first_due = loader.now_ms() + loader.lead_ms(n)
    dues = due_times(first_due, n, rate)
    bodies = (
        loader.batch_body(
            [{"body": BODY, "deliver_at_ms": d} for d in dues[i : i + loader.BATCH_SIZE]]
        )
        for i in range(0, n, loader.BATCH_SIZE)
    )
    load = await loader.send_batches(
        process.HOST, port, topic, bodies, deadline_s=loader.lead_ms(n) / 1e3
    )
    if load.stored != n:
        raise RuntimeError(f"loaded {load.stored} of {n} timers ({load.describe_failures()})")
    if loader.now_ms() >= first_due:
        raise RuntimeError(f"loading took {load.seconds:.1f} s, past the first due time")
    return dues, load


@dataclass(slots=True)
class Recorder:
    """(a) and (b) of every first delivery a consumer of the schedule's topic receives."""

    to_log: list[float] = field(default_factory=list)
    to_consumer: list[float] = field(default_factory=list)

    def record(self, messages: list[dict[str, Any]], response: Response) -> None:
        received_ms = response.done_wall_ns / 1e6
        for m in messages:
            if m["attempt"] == 1:
                self.to_log.append(m["delivered_at_ms"] - m["deliver_at_ms"])
                self.to_consumer.append(received_ms - m["deliver_at_ms"])

    async def consume(self, port: int, dues: list[int]) -> consumer.ConsumeStats:
        """Long-poll the schedule's topic until every timer arrived (or the grace ran out)."""
        timeout_s = (dues[-1] - loader.now_ms()) / 1e3 + DRAIN_GRACE_S
        return await consumer.consume(
            process.HOST,
            port,
            TOPIC,
            GROUP,
            expected=len(dues),
            timeout_s=timeout_s,
            on_batch=self.record,
        )


async def drive(port: int, pid: int, *, rate: int, seconds: float) -> Lateness:
    dues, load = await load_schedule(port, rate=rate, seconds=seconds)
    recorder = Recorder()
    meter = process.CpuMeter(pid)

    async def window() -> None:  # CPU over the due window only
        await asyncio.sleep((dues[0] - loader.now_ms()) / 1e3)
        with meter:
            await asyncio.sleep(seconds)

    meter_task = asyncio.create_task(window())
    with process.Profile(pid, "lateness"):
        got = await recorder.consume(port, dues)
        await meter_task
    return Lateness(
        spread(recorder.to_log),
        spread(recorder.to_consumer),
        len(dues),
        len(recorder.to_log),
        got.redelivered,
        load.rate,
        meter.describe(),
    )


@dataclass(frozen=True, slots=True)
class LatenessRun:
    result: Lateness
    floor: Spread  # the Python timer thread's lateness on the same schedule
    rate: int
    seconds: float
    stalls: stalls.Stalls  # the machine's own, in the same run (bench/stalls.py)
    working: tuple[tuple[float, Spread], ...] = ()  # the floor loop with work a timer (µs)


def measure(*, seconds: float, rate: int = RATE_PER_S) -> LatenessRun:
    floor_s = min(seconds, FLOOR_SECONDS)
    floor = timer_floor(rate, floor_s)
    machine = stalls.measure(min(seconds, stalls.SECONDS))
    working = tuple((w, timer_floor(rate, floor_s, w)) for w in FLOOR_WORK_US)
    with (
        tempfile.TemporaryDirectory(prefix="rocktimer-bench-lateness-") as tmp,
        process.service(Path(tmp)) as service,
    ):
        result = run(lambda: drive(service.port, service.pid, rate=rate, seconds=seconds))
    return LatenessRun(result, floor, rate, seconds, machine, working)


def run_figure(*, seconds: float, rate: int = RATE_PER_S) -> list[report.Row]:
    return rows(measure(seconds=seconds, rate=rate))


def rows(run_: LatenessRun) -> list[report.Row]:
    result, floor, rate, seconds = run_.result, run_.floor, run_.rate, run_.seconds
    complete = result.received == result.expected
    counts = f"{result.received:,}/{result.expected:,} received"
    if result.redelivered:
        counts += f", {result.redelivered} redelivered"
    title = f"{rate:,} timers/s due for {seconds:.0f} s"
    rows = []
    for label, measured, digits in (
        ("(a) due -> topic log", result.to_log, 0),
        ("(b) due -> long-polling consumer", result.to_consumer, 1),
    ):
        rows.append(
            report.Row(
                "3",
                f"lateness {label}, {title}",
                measured.ms(digits),
                f"Python timer thread {floor.ms(2)}",
                f"p99 x{measured.p99 / floor.p99:.0f} floor" if floor.p99 > 0 else "n/a",
                f"p99 <= {TARGET_P99_MS:.0f} ms",
                measured.p99 <= TARGET_P99_MS and complete,
                f"{counts}; {result.cpu}",
            )
        )
    for work_us, late in run_.working:
        share = work_us * rate / 1e6
        rows.append(
            report.Row(
                "3",
                f"floor: a Python timer loop doing {work_us:.0f} µs of work a timer "
                f"({share:.0%} of a core), same schedule, no server",
                late.ms(1),
                f"with no work {floor.ms(2)}",
                "-",
                "-",
                None,
                f"{late.n:,} timers; what a process may use of a core here and stay on time",
            )
        )
    return [*rows, stalls.row("3", run_.stalls)]


def main() -> None:
    s = scale.current()
    print(report.table(run_figure(seconds=s.lateness_seconds), s.name))


if __name__ == "__main__":
    main()
