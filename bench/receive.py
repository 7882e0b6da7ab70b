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
  receive + ack against a durable batch send of the same size (target: within 2x). The
  two alternate in BIG_ROUNDS rounds (send a share, consume a share, …), so that a drift
  of this VM's speed over the seconds of the run lands on both sides of the ratio (one
  send phase then one consume phase read 1.74-2.74 x for one build within an hour);
  the ratio is of the totals, with the median of the rounds' ratios beside it.

Every message must be settled exactly once (status "acked"/"nacked") and none received
twice. The ratio column is each consumer phase against the send phase: a nack writes a
retry timer, as a send writes a timer.

    python -m bench.receive
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from bench import loader, report, scale
from bench.client import Connection, HttpError, build_request, run
from tests.support import process

CONSUMERS = 4  # concurrent consumers on one group (and send connections for the reference)
PER_CALL = 100  # messages per receive, receipts per ack/nack, messages per batch send
BIG_CALL = 1_000  # the same, api.md's maximum: the consumer path's per-message cost
BIG_ROUNDS = 5  # send 1000 / consume 1000 rounds, alternating
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
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    cpu_wall_s: float = 0.0  # the span the two CPU times were metered over

    def metered(self, meter: process.CpuMeter) -> None:
        self.server_cpu_s, self.client_cpu_s = meter.server_s, meter.client_s
        self.cpu_wall_s = meter.wall_s

    @property
    def cpu(self) -> str:
        return process.describe_cpu(self.server_cpu_s, self.client_cpu_s, self.cpu_wall_s)

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


def merged(phases: Sequence[Phase]) -> Phase:
    """Rounds of one kind as one phase: counts, times and CPU summed."""
    total = Phase(expected=0)
    for phase in phases:
        total.expected += phase.expected
        total.done += phase.done
        total.calls += phase.calls
        total.statuses.update(phase.statuses)
        total.duplicates += phase.duplicates
        total.seconds += phase.seconds
        total.server_cpu_s += phase.server_cpu_s
        total.client_cpu_s += phase.client_cpu_s
        total.cpu_wall_s += phase.cpu_wall_s
    return total


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
    port: int,
    topic: str,
    n: int,
    consumers: int,
    verb: str,
    per_call: int = PER_CALL,
    seen: set[str] | None = None,
) -> Phase:
    """``consumers`` loops of receive ``per_call`` + ``verb`` (ack or nack) them, until
    ``n`` are received or the topic is empty. ``seen``: msg_ids received before (a round's
    earlier rounds), to count a second receive across them."""
    authority = f"{process.HOST}:{port}"
    base = f"/v1/topics/{topic}/groups/{GROUP}"

    @functools.cache
    def receive(limit: int) -> bytes:
        body = {"max_messages": limit, "wait_ms": 0, "invisible_ms": INVISIBLE_MS}
        return build_request("POST", authority, f"{base}/receive", json=body)

    phase = Phase(expected=n)
    seen = set() if seen is None else seen
    taken = 0  # received, or asked for by a receive under way: the loops stop at n
    deadline = time.monotonic() + PHASE_TIMEOUT_S

    async def consumer() -> None:
        nonlocal taken
        conn = await Connection.open(process.HOST, port)
        try:
            for _ in range(n + 2):  # bounded: each receive takes one or more, or ends it
                if time.monotonic() >= deadline or taken >= n:
                    return
                want = min(per_call, n - taken)
                taken += want
                r = await conn.request(receive(want), HTTP_TIMEOUT_S)
                if r.status != 200:
                    raise HttpError(f"receive: {r.status} {r.body[:300]!r}")
                messages = r.json()["messages"]
                taken -= want - len(messages)  # what it did not get is left for the next
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
    big_sends: tuple[Phase, ...]  # the alternating rounds, in order
    big_consumes: tuple[Phase, ...]
    consumers: int

    @property
    def big_send(self) -> Phase:
        return merged(self.big_sends)

    @property
    def big_consume(self) -> Phase:
        return merged(self.big_consumes)

    def round_ratios(self) -> list[float]:
        """Each round's server CPU a message, receive + ack over send."""
        return [
            c.cpu_us / s.cpu_us
            for s, c in zip(self.big_sends, self.big_consumes, strict=True)
            if s.cpu_us > 0 and c.cpu_us > 0
        ]


async def metered(pid: int, name: str, phase_of: Callable[[], Awaitable[Phase]]) -> Phase:
    """A phase with the server's and this process's CPU over it (and py-spy on request)."""
    with process.CpuMeter(pid) as cpu, process.Profile(pid, f"consume-{name}"):
        phase = await phase_of()
    phase.metered(cpu)
    return phase


async def big_rounds(
    port: int, pid: int, n: int, consumers: int
) -> tuple[tuple[Phase, ...], tuple[Phase, ...]]:
    """Batch sends of BIG_CALL and receive + ack of BIG_CALL (``n`` preloaded on
    BIG_CONSUME_TOPIC), alternating in rounds of an equal share."""
    rounds = max(1, min(BIG_ROUNDS, n // BIG_CALL))
    share = -(-n // rounds)
    sends: list[Phase] = []
    consumes: list[Phase] = []
    seen: set[str] = set()
    for i in range(rounds):
        k = min(share, n - i * share)
        sends.append(
            await metered(
                pid,
                f"send1000-{i}",
                functools.partial(
                    send_phase, port, max(k, BIG_CALL), consumers, BIG_CALL, BIG_SEND_TOPIC
                ),
            )
        )
        consumes.append(
            await metered(
                pid,
                f"consume1000-{i}",
                functools.partial(
                    settle_phase, port, BIG_CONSUME_TOPIC, k, consumers, "ack", BIG_CALL, seen
                ),
            )
        )
    return tuple(sends), tuple(consumes)


async def drive(port: int, pid: int, *, consume_n: int, nack_n: int, consumers: int) -> ConsumeRun:
    await preload(port, CONSUME_TOPIC, consume_n)
    await preload(port, NACK_TOPIC, nack_n)
    await preload(port, BIG_CONSUME_TOPIC, consume_n)
    await put_retry_policy(port, NACK_TOPIC, GROUP)
    send = await metered(pid, "send", lambda: send_phase(port, nack_n, consumers))
    consume = await metered(
        pid, "consume", lambda: settle_phase(port, CONSUME_TOPIC, consume_n, consumers, "ack")
    )
    nack = await metered(
        pid, "nack", lambda: settle_phase(port, NACK_TOPIC, nack_n, consumers, "nack")
    )
    big_sends, big_consumes = await big_rounds(port, pid, consume_n, consumers)
    return ConsumeRun(send, consume, nack, big_sends, big_consumes, consumers)


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
    ratios = run_.round_ratios()
    median = f"{statistics.median(ratios):.2f}" if ratios else "n/a"
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
            f"send {big_send.server_cpu_s:.2f} s for {big_send.done:,}; "
            f"{len(run_.big_sends)} alternating rounds, ratios "
            f"{' / '.join(f'{r:.2f}' for r in ratios)} (median {median})",
        ),
    ]


def run_figure(*, consume_n: int, nack_n: int, consumers: int = CONSUMERS) -> list[report.Row]:
    return rows(measure(consume_n=consume_n, nack_n=nack_n, consumers=consumers))


def main() -> None:
    s = scale.current()
    print(report.table(run_figure(consume_n=s.consume_n, nack_n=s.nack_n), s.name))


if __name__ == "__main__":
    main()
