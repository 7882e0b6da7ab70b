"""Figure 17: push delivery (webhooks) to a fast local receiver (bench/hook_receiver.py).

(a) lateness: 5,000 timers/s falling due for ``seconds`` (figure 3's schedule) on a topic
    whose group pushes to the receiver (max_in_flight LATENESS_IN_FLIGHT, signed); due ->
    webhook received = the receiver's clock when the POST arrived − ``deliver_at_ms``.
    Beside it, the same messages' due -> topic log (the service's own stamps): the push
    cannot be earlier than that, so the ratio is what pushing adds.
(b) deliveries/s: ``n`` messages due now loaded first, then the group gets its push
    settings (max_in_flight RATE_IN_FLIGHT, signed); from that PUT's reply until the group
    has nothing in flight or backlog (every POST answered and acked). Ceiling: the bench's
    own client POSTing bodies of the same size to the same receiver from RATE_IN_FLIGHT
    keep-alive connections, the same count: what the receiver and the loopback allow.

    python -m bench.push
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import lateness, loader, report, scale, stalls
from bench.client import Client, Connection, build_request, run
from bench.stats import Spread, si, spread
from tests.support import process

RATE_PER_S = lateness.RATE_PER_S  # 5,000 timers/s due, as figure 3
LATENESS_TOPIC = "push-lateness"
RATE_TOPIC = "push-rate"
GROUP = "hook"
SECRET = "bench-secret"  # signed POSTs: the HMAC is part of what a push costs
LATENESS_IN_FLIGHT = 64  # 5k/s x a few ms of POST + ack commit, with room
RATE_IN_FLIGHT = 256  # enough that the ack commits (fsync) do not bound the rate
BODY = "x" * 100  # figure 3's message body
POLL_S = 0.02
DRAIN_TIMEOUT_S = 120.0
TARGET_P99_MS = 10.0
TARGET_RATE = 10_000.0


def receiver_process(work_dir: Path) -> process.ServerProcess:
    port = process.free_port()
    argv = [sys.executable, "-m", "bench.hook_receiver", "--host", process.HOST]
    return process.ServerProcess(
        "hook receiver", [*argv, "--port", str(port)], {}, port, "/stats", work_dir / "hook.log"
    )


@dataclass(frozen=True, slots=True)
class PushRun:
    lateness: Spread  # due -> webhook received
    to_log: Spread  # due -> topic log, same messages
    expected: int
    pushed_rate: float  # msg/s, PUT to every message acked
    direct_rate: float  # msg/s, the client straight to the receiver
    n: int
    seconds: float
    cpu: str


async def _set_push(service: Client, topic: str, url: str, in_flight: int) -> None:
    push = {"url": url, "secret": SECRET, "max_in_flight": in_flight}
    r = await service.call("PUT", f"/v1/topics/{topic}/groups/{GROUP}", {"push": push})
    if r.status != 200:
        raise RuntimeError(f"PUT push settings: {r.status} {r.body[:300]!r}")


async def _stats(receiver: Client) -> dict[str, Any]:
    stats: dict[str, Any] = (await receiver.call("GET", "/stats")).json()
    return stats


async def _wait(done: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(POLL_S)


async def measure_lateness(
    service: Client, receiver: Client, hook: str, port: int, seconds: float
) -> tuple[Spread, Spread, int]:
    await _set_push(service, LATENESS_TOPIC, hook, LATENESS_IN_FLIGHT)
    dues, _ = await lateness.load_schedule(
        port, rate=RATE_PER_S, seconds=seconds, topic=LATENESS_TOPIC
    )

    async def all_in() -> bool:  # the count alone: the lists are read once, below
        count: int = (await receiver.call("GET", "/count")).json()["count"]
        return count == len(dues)

    grace = (dues[-1] - loader.now_ms()) / 1e3 + lateness.DRAIN_GRACE_S
    await _wait(all_in, grace, f"{len(dues):,} webhooks")
    stats = await _stats(receiver)
    await receiver.call("POST", "/reset")
    return spread(stats["lateness_ms"]), spread(stats["to_log_ms"]), len(dues)


async def measure_rate(
    service: Client, hook: str, port: int, pid: int, n: int
) -> tuple[float, str]:
    bodies = (
        loader.batch_body([{"body": BODY} for _ in range(min(loader.BATCH_SIZE, n - i))])
        for i in range(0, n, loader.BATCH_SIZE)
    )
    load = await loader.send_batches(process.HOST, port, RATE_TOPIC, bodies, deadline_s=300)
    if load.stored != n:
        raise RuntimeError(f"loaded {load.stored} of {n} ({load.describe_failures()})")

    async def settled() -> bool:
        groups = (await service.call("GET", f"/v1/topics/{RATE_TOPIC}/groups")).json()
        g = groups["items"][0]
        return bool(g["backlog"] == 0 and g["inflight"] == 0 and g["retrying"] == 0)

    meter = process.CpuMeter(pid)
    with meter:
        started = time.perf_counter()
        await _set_push(service, RATE_TOPIC, hook, RATE_IN_FLIGHT)
        await _wait(settled, DRAIN_TIMEOUT_S, f"{n:,} pushes acked")
        took = time.perf_counter() - started
    return n / took, meter.describe()


async def measure_direct(receiver_port: int, n: int) -> float:
    """The ceiling: ``n`` POSTs of a pushed message's size from RATE_IN_FLIGHT connections."""
    item = {
        "topic": RATE_TOPIC, "msg_id": "01JBENCH000000000000000000", "body": BODY,
        "body_encoding": "utf8", "properties": {}, "delivered_at_ms": loader.now_ms(),
        "attempt": 1, "group": GROUP,
    }  # fmt: skip  # no deliver_at_ms: the receiver notes no lateness for these
    request = build_request("POST", f"{process.HOST}:{receiver_port}", "/hook", orjson.dumps(item))
    left = n

    async def worker() -> None:
        nonlocal left
        conn = await Connection.open(process.HOST, receiver_port)
        try:
            while left > 0:
                left -= 1
                response = await conn.request(request, 30)
                if response.status != 200:
                    raise RuntimeError(f"receiver answered {response.status}")
        finally:
            conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(RATE_IN_FLIGHT)))
    return n / (time.perf_counter() - started)


async def drive(service_port: int, pid: int, receiver_port: int, seconds: float, n: int) -> PushRun:
    service = Client(process.HOST, service_port)
    receiver = Client(process.HOST, receiver_port)
    hook = f"http://{process.HOST}:{receiver_port}/hook"
    try:
        with process.Profile(pid, "push-lateness"):
            late, to_log, expected = await measure_lateness(
                service, receiver, hook, service_port, seconds
            )
        pushed, cpu = await measure_rate(service, hook, service_port, pid, n)
        await receiver.call("POST", "/reset")
        direct = await measure_direct(receiver_port, n)
    finally:
        service.close()
        receiver.close()
    return PushRun(late, to_log, expected, pushed, direct, n, seconds, cpu)


def measure(*, seconds: float, n: int) -> PushRun:
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-push-") as tmp:
        work = Path(tmp)
        with receiver_process(work) as hook, process.service(work) as service:
            return run(lambda: drive(service.port, service.pid, hook.port, seconds, n))


def run_figure(*, seconds: float, n: int) -> list[report.Row]:
    return [*rows(measure(seconds=seconds, n=n)), stalls.measured_row("17", seconds)]


def rows(r: PushRun) -> list[report.Row]:
    complete = r.lateness.n == r.expected
    counts = f"{r.lateness.n:,}/{r.expected:,} received (first attempts)"
    return [
        report.Row(
            "17",
            f"push: due -> webhook received, {RATE_PER_S:,} timers/s for {r.seconds:.0f} s",
            r.lateness.ms(1),
            f"due -> topic log {r.to_log.ms(0)}",
            f"p99 x{r.lateness.p99 / r.to_log.p99:.1f} topic log" if r.to_log.p99 > 0 else "n/a",
            f"p99 <= {TARGET_P99_MS:.0f} ms",
            r.lateness.p99 <= TARGET_P99_MS and complete,
            f"{counts}; max_in_flight {LATENESS_IN_FLIGHT}, signed",
        ),
        report.Row(
            "17",
            f"push: webhook deliveries/s ({r.n:,} due, max_in_flight {RATE_IN_FLIGHT})",
            f"{si(r.pushed_rate)} msg/s",
            f"client -> receiver directly {si(r.direct_rate)} POST/s",
            report.ratio(r.pushed_rate, r.direct_rate),
            f">= {si(TARGET_RATE)}/s",
            r.pushed_rate >= TARGET_RATE,
            f"PUT push to all acked; signed; {r.cpu}",
        ),
    ]


def main() -> None:
    s = scale.current()
    print(report.table(run_figure(seconds=s.lateness_seconds, n=s.push_n), s.name))


if __name__ == "__main__":
    main()
