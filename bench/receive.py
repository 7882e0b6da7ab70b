"""Figure 5: consuming over HTTP — receive 100 + ack 100, and the cost of a nack.

One server, three timed phases, each from ``CONSUMERS`` keep-alive connections:

- send (the reference): ``POST .../messages/batch`` with 100 messages a request, each a
  durable one-hour timer, ``nack_n`` messages in all: messages/s.
- consume: ``consume_n`` messages were preloaded due now (batch sends with no delay: they
  go straight to the topic log). Each consumer loops receive (``max_messages`` 100,
  ``wait_ms`` 0) then one ``ack`` of the 100 receipts, on one group, until a receive comes
  back empty. Messages acked per second, first receive to last ack.
- nack: the same on another topic whose group has the retry policy ``fixed`` 1 h (set with
  ``PUT /v1/topics/{t}/groups/{g}``), so nacked messages do not come back during the run;
  each receive of 100 is followed by one ``nack`` of the 100 receipts.
- send 1000 and consume 1000 (issue 14's consumer figure): the same send and consume with
  1000 messages a request, receipts an ack. Beside msg/s, the server's CPU per message:
  receive + ack against a durable batch send of the same size (target: within 2x).

Every message must be settled exactly once (status "acked"/"nacked") and none received
twice. The ratio column is each consumer phase against the send phase: a nack writes a
retry timer, as a send writes a timer.

    python -m bench.receive
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from bench import loader, process, report, scale
from bench.client import Connection, HttpError, build_request, run

CONSUMERS = 4  # concurrent consumers on one group (and send connections for the reference)
PER_CALL = 100  # messages per receive, receipts per ack/nack, messages per batch send
BIG_CALL = 1_000  # the same, api.md's maximum: the consumer path's per-message cost
INVISIBLE_MS = 600_000  # 10 min: nothing becomes visible again during the run
SEND_DELAY_MS = 3_600_000  # the reference sends are 1 h timers, as the nack's retry timer
RETRY_INTERVAL_MS = 3_600_000  # the nack group's fixed retry interval
HTTP_TIMEOUT_S = 30.0
PHASE_TIMEOUT_S = 600.0  # a bound on each phase; at the target rate it takes seconds
PRELOAD_RATE_FLOOR = 5_000  # msg/s: bounds the untimed preload
CONSUME_TOPIC = "consume"
NACK_TOPIC = "nack"
SEND_TOPIC = "send100"
BIG_CONSUME_TOPIC = "consume1000"
BIG_SEND_TOPIC = "send1000"
GROUP = "bench"
BODY = "m" * 100
TARGET_MSG_S = 30_000
TARGET_BIG_MSG_S = 100_000  # receive 1000 + ack 1000, 4 consumers
TARGET_CPU_RATIO = 2.0  # server CPU a message: receive + ack within 2x a batch send


@dataclass(slots=True)
class Phase:
    """One timed phase: messages settled (or stored) per second, with its statuses."""

    expected: int
    done: int = 0
    calls: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    seconds: float = 0.0
    cpu: str = ""
    server_cpu_s: float = 0.0

    @property
    def cpu_us(self) -> float:
        """The server's CPU per message settled (or stored), in µs."""
        return self.server_cpu_s / self.done * 1e6 if self.done else 0.0

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else 0.0

    @property
    def clean(self) -> bool:
        """Every message settled once with the expected status, none received twice."""
        return self.done == self.expected and not self.duplicates and len(self.statuses) <= 1


async def preload(port: int, topic: str, n: int) -> None:
    """``n`` messages due now (no delay): the writer appends them to the log at once."""
    body = loader.batch_body([{"body": BODY}] * loader.BATCH_SIZE)
    bodies = (
        body if i + loader.BATCH_SIZE <= n else loader.batch_body([{"body": BODY}] * (n - i))
        for i in range(0, n, loader.BATCH_SIZE)
    )
    stats = await loader.send_batches(
        process.HOST, port, topic, bodies, deadline_s=n / PRELOAD_RATE_FLOOR + 30
    )
    if stats.stored != n:
        raise RuntimeError(f"preloaded {stats.stored} of {n} ({stats.describe_failures()})")


async def put_retry_policy(port: int, topic: str, group: str) -> None:
    conn = await Connection.open(process.HOST, port)
    try:
        settings = {"retry": {"policy": "fixed", "interval_ms": RETRY_INTERVAL_MS}}
        request = build_request(
            "PUT", f"{process.HOST}:{port}", f"/v1/topics/{topic}/groups/{group}", json=settings
        )
        r = await conn.request(request, HTTP_TIMEOUT_S)
        if r.status != 200:
            raise HttpError(f"PUT group settings: {r.status} {r.body[:300]!r}")
    finally:
        conn.close()


async def send_phase(
    port: int, n: int, consumers: int, per_call: int = PER_CALL, topic: str = SEND_TOPIC
) -> Phase:
    """The reference: batch sends of ``per_call`` one-hour timers from ``consumers`` connections."""
    body = loader.batch_body([{"body": BODY, "delay_ms": SEND_DELAY_MS}] * per_call)
    stats = await loader.send_batches(
        process.HOST,
        port,
        topic,
        itertools.repeat(body, n // per_call),
        concurrency=consumers,
        deadline_s=PHASE_TIMEOUT_S,
    )
    phase = Phase(expected=n // per_call * per_call, done=stats.stored, calls=stats.requests)
    phase.statuses.update({str(status): count for status, count in stats.failed.items()})
    phase.seconds = stats.seconds
    return phase


async def settle_phase(
    port: int, topic: str, n: int, consumers: int, verb: str, per_call: int = PER_CALL
) -> Phase:
    """``consumers`` loops of receive ``per_call`` + ``verb`` (ack or nack) them, until empty."""
    authority = f"{process.HOST}:{port}"
    base = f"/v1/topics/{topic}/groups/{GROUP}"
    receive = build_request(
        "POST",
        authority,
        f"{base}/receive",
        json={"max_messages": per_call, "wait_ms": 0, "invisible_ms": INVISIBLE_MS},
    )
    phase = Phase(expected=n)
    seen: set[str] = set()
    deadline = time.monotonic() + PHASE_TIMEOUT_S

    async def consumer() -> None:
        conn = await Connection.open(process.HOST, port)
        try:
            for _ in range(n // per_call + 2):  # bounded: more than enough receives
                if time.monotonic() >= deadline:
                    return
                r = await conn.request(receive, HTTP_TIMEOUT_S)
                if r.status != 200:
                    raise HttpError(f"receive: {r.status} {r.body[:300]!r}")
                messages = r.json()["messages"]
                phase.calls += 1
                if not messages:
                    return  # everything preloaded has been handed out
                receipts = []
                for m in messages:
                    if m["msg_id"] in seen:
                        phase.duplicates += 1
                    seen.add(m["msg_id"])
                    receipts.append(m["receipt"])
                body = orjson.dumps({"receipts": receipts})
                r = await conn.request(
                    build_request("POST", authority, f"{base}/{verb}", body), HTTP_TIMEOUT_S
                )
                if r.status != 200:
                    raise HttpError(f"{verb}: {r.status} {r.body[:300]!r}")
                phase.calls += 1
                for result in r.json()["results"]:
                    phase.statuses[result["status"]] += 1
                    phase.done += 1
        finally:
            conn.close()

    started = time.monotonic()
    await asyncio.gather(*(consumer() for _ in range(consumers)))
    phase.seconds = time.monotonic() - started
    return phase


@dataclass(frozen=True, slots=True)
class ConsumeRun:
    send: Phase
    consume: Phase
    nack: Phase
    big_send: Phase
    big_consume: Phase
    consumers: int


async def drive(port: int, pid: int, *, consume_n: int, nack_n: int, consumers: int) -> ConsumeRun:
    await preload(port, CONSUME_TOPIC, consume_n)
    await preload(port, NACK_TOPIC, nack_n)
    await preload(port, BIG_CONSUME_TOPIC, consume_n)
    await put_retry_policy(port, NACK_TOPIC, GROUP)
    phases: list[Phase] = []
    plan: tuple[tuple[str, Callable[[], Awaitable[Phase]]], ...] = (
        ("send", lambda: send_phase(port, nack_n, consumers)),
        ("consume", lambda: settle_phase(port, CONSUME_TOPIC, consume_n, consumers, "ack")),
        ("nack", lambda: settle_phase(port, NACK_TOPIC, nack_n, consumers, "nack")),
        (
            "send1000",
            lambda: send_phase(port, max(consume_n, BIG_CALL), consumers, BIG_CALL, BIG_SEND_TOPIC),
        ),
        (
            "consume1000",
            lambda: settle_phase(port, BIG_CONSUME_TOPIC, consume_n, consumers, "ack", BIG_CALL),
        ),
    )
    for name, phase_of in plan:
        with process.CpuMeter(pid) as cpu, process.Profile(pid, f"consume-{name}"):
            phase = await phase_of()
        phase.cpu = cpu.describe()
        phase.server_cpu_s = cpu.server_s
        phases.append(phase)
    send, consume, nack, big_send, big_consume = phases
    return ConsumeRun(send, consume, nack, big_send, big_consume, consumers)


def measure(*, consume_n: int, nack_n: int, consumers: int = CONSUMERS) -> ConsumeRun:
    with (
        tempfile.TemporaryDirectory(prefix="rocktimer-bench-consume-") as tmp,
        process.service(Path(tmp)) as service,
    ):
        return run(
            lambda: drive(
                service.port, service.pid, consume_n=consume_n, nack_n=nack_n, consumers=consumers
            )
        )


def _statuses(phase: Phase) -> str:
    text = ", ".join(f"{n:,} {s}" for s, n in sorted(phase.statuses.items()))
    if phase.duplicates:
        text += f", {phase.duplicates} received twice"
    return text


def _reference(send: Phase, per_call: int) -> str:
    text = f"batch send {per_call}/request (1 h timers) {send.rate:,.0f} msg/s"
    return text if send.clean else f"{text} ({_statuses(send)})"


def _consume_row(consume: Phase, send: Phase, per_call: int, target: int, k: int) -> report.Row:
    """Receive ``per_call`` + ack ``per_call`` from ``k`` loops, beside its batch sends."""
    return report.Row(
        "5",
        f"consume: receive {per_call} + ack {per_call}, {k} consumers, one group",
        f"{consume.rate:,.0f} msg/s",
        _reference(send, per_call),
        report.ratio(consume.rate, send.rate),
        f">= {target:,} msg/s",
        consume.rate >= target and consume.clean,
        f"{_statuses(consume)} in {consume.seconds:.1f} s; {consume.calls:,} calls; "
        f"{consume.cpu} (send: {send.cpu})",
    )


def rows(run_: ConsumeRun) -> list[report.Row]:
    send, nack, k = run_.send, run_.nack, run_.consumers
    big_send, big_consume = run_.big_send, run_.big_consume
    return [
        _consume_row(run_.consume, send, PER_CALL, TARGET_MSG_S, k),
        report.Row(
            "5",
            f"nack: receive {PER_CALL} + nack {PER_CALL} (retry fixed 1 h), {k} consumers",
            f"{nack.rate:,.0f} msg/s",
            _reference(send, PER_CALL),
            report.ratio(nack.rate, send.rate),
            "-",
            None if nack.clean else False,
            f"{_statuses(nack)} in {nack.seconds:.1f} s; a nack costs "
            f"{send.rate / nack.rate if nack.rate else 0:.1f}x a send; {nack.cpu}",
        ),
        # issue 14's consumer figure, and the server's CPU a message beside a batch send
        _consume_row(big_consume, big_send, BIG_CALL, TARGET_BIG_MSG_S, k),
        report.Row(
            "5",
            f"server CPU a message: receive {BIG_CALL} + ack {BIG_CALL}",
            f"{big_consume.cpu_us:.1f} µs",
            f"batch send {BIG_CALL}/request {big_send.cpu_us:.1f} µs",
            report.ratio(big_consume.cpu_us, big_send.cpu_us),
            f"<= {TARGET_CPU_RATIO:.0f}x",
            big_consume.cpu_us <= TARGET_CPU_RATIO * big_send.cpu_us and big_consume.clean,
            f"server CPU {big_consume.server_cpu_s:.2f} s for {big_consume.done:,} messages; "
            f"send {big_send.server_cpu_s:.2f} s for {big_send.done:,}",
        ),
    ]


def run_figure(*, consume_n: int, nack_n: int, consumers: int = CONSUMERS) -> list[report.Row]:
    return rows(measure(consume_n=consume_n, nack_n=nack_n, consumers=consumers))


def main() -> None:
    s = scale.current()
    print(report.table(run_figure(consume_n=s.consume_n, nack_n=s.nack_n), s.name))


if __name__ == "__main__":
    main()
