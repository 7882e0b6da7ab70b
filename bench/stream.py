"""Figure 18: streaming receive (server-sent events).

(a) Lateness. Figure 3's schedule — 5,000 timers/s falling due for ``seconds``, 5 per ms,
loaded ahead by batch sends — consumed by one stream (``max_in_flight`` 1000) whose
receipts are acked, whatever has gathered, on a second connection. Due -> stream consumer
= the client's clock when the chunk carrying the event arrived − ``deliver_at_ms``. In
the same run, figure 6's Redis Lua poller on the same schedule (a fresh redis-server):
its due -> receiver. Targets: p99 <= the poller's p99, max <= 20 ms.

(b) 2,000 open streams, each on a topic of its own. Server VmRSS with them all open,
beside the same server with one open (after its probes); target < 500 MiB. Then probes: single
messages due one every PROBE_GAP_MS, each on one stream picked at random, sent ahead;
due -> arrival p99 with every stream open, beside the same probes with one stream open
(before the others are); target p99 <= 10 ms.

The client is asyncio on uvloop as the rest of the bench (client.py): a stream is a raw
connection whose chunked body is split into events as it arrives.

    python -m bench.stream
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import orjson

from bench import lateness, loader, redis_alt, report, scale, stalls
from bench.client import HEADER_END, Client, HttpError, build_request, run
from bench.stats import Spread, spread
from tests.support import process

MAX_IN_FLIGHT = 1_000  # the most a stream may hold unacked (api.md)
INVISIBLE_MS = 60_000  # longer than any window: nothing is redelivered while measured
ACK_MAX = 1_000  # receipts per ack (api.md's maximum)
PROBE_GAP_MS = 10  # between two probes' due times
PROBE_LEAD_MS = 1_000  # the first probe's due time after the last is sent
PARK_TIMEOUT_S = 60.0  # for every stream to be open and waiting
MAX_TARGET_MS = 20.0
PROBE_TARGET_P99_MS = 10.0
RSS_TARGET_MIB = 500
TOPIC_PREFIX = "stream-"
GROUP = "bench"

T = TypeVar("T")
OnMessages = Callable[[list[dict[str, Any]], int], None]


class EventStream(asyncio.Protocol):
    """One stream's connection: its chunked ``text/event-stream`` body is split into
    events as it arrives; ``on_messages(messages, wall_ns)`` sees each chunk's messages."""

    def __init__(self, on_messages: OnMessages) -> None:
        self.on_messages = on_messages
        self.transport: asyncio.Transport | None = None
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._raw = bytearray()  # chunked framing not yet decoded
        self._body = bytearray()  # event text not yet split into events
        self._head = False

    @classmethod
    async def open(cls, port: int, path: str, on_messages: OnMessages) -> EventStream:
        loop = asyncio.get_running_loop()
        _, stream = await loop.create_connection(lambda: cls(on_messages), process.HOST, port)
        assert stream.transport is not None
        stream.transport.write(build_request("GET", f"{process.HOST}:{port}", path))
        await asyncio.wait_for(stream.opened, PARK_TIMEOUT_S)
        return stream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self.opened.done():
            self.opened.set_exception(exc or HttpError("the server closed the stream"))

    def data_received(self, data: bytes) -> None:
        wall_ns = time.time_ns()
        self._raw += data
        if not self._head:
            end = self._raw.find(HEADER_END)
            if end < 0:
                return
            status = bytes(self._raw[: self._raw.find(b"\r\n")])
            if b" 200 " not in status:
                self.opened.set_exception(HttpError(f"stream: {bytes(self._raw[:300])!r}"))
                self.close()
                return
            del self._raw[: end + len(HEADER_END)]
            self._head = True
            self.opened.set_result(None)
        while (line_end := self._raw.find(b"\r\n")) >= 0:  # chunk: size CRLF data CRLF
            size = int(self._raw[:line_end], 16)
            start = line_end + 2
            if len(self._raw) < start + size + 2:
                break
            self._body += self._raw[start : start + size]
            del self._raw[: start + size + 2]
        messages = []
        while (event_end := self._body.find(b"\n\n")) >= 0:
            for line in bytes(self._body[:event_end]).split(b"\n"):
                if line.startswith(b"data: "):
                    messages.append(orjson.loads(line[6:]))
            del self._body[: event_end + 2]
        if messages:
            self.on_messages(messages, wall_ns)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def stream_path(topic: str) -> str:
    return (
        f"/v1/topics/{topic}/groups/{GROUP}/stream"
        f"?max_in_flight={MAX_IN_FLIGHT}&invisible_ms={INVISIBLE_MS}"
    )


@dataclass(slots=True)
class Acker:
    """Acks, on its own connection, whatever receipts gathered while the last ack ran."""

    client: Client
    pending: dict[str, list[str]] = field(default_factory=dict)  # topic -> receipts
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    acked: int = 0
    other: Counter[str] = field(default_factory=Counter)  # expired / unknown

    def add(self, topic: str, receipts: list[str]) -> None:
        self.pending.setdefault(topic, []).extend(receipts)
        self.wake.set()

    async def run(self) -> None:
        """Until cancelled; an ack that fails ends it with the error."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.pending:
                topic, receipts = next(iter(self.pending.items()))
                batch, rest = receipts[:ACK_MAX], receipts[ACK_MAX:]
                if rest:
                    self.pending[topic] = rest
                else:
                    del self.pending[topic]
                path = f"/v1/topics/{topic}/groups/{GROUP}/ack"
                r = await self.client.call("POST", path, {"receipts": batch})
                if r.status != 200:
                    raise HttpError(f"ack: {r.status} {r.body[:300]!r}")
                for result in r.json()["results"]:
                    if result["status"] == "acked":
                        self.acked += 1
                    else:
                        self.other[result["status"]] += 1


@dataclass(slots=True)
class Arrivals:
    """First deliveries seen by the streams: due -> topic log, due -> client."""

    expected: int
    acker: Acker
    to_log: list[float] = field(default_factory=list)
    to_client: list[float] = field(default_factory=list)
    redelivered: int = 0
    all_in: asyncio.Event = field(default_factory=asyncio.Event)

    def on_messages(self, messages: list[dict[str, Any]], wall_ns: int) -> None:
        arrived_ms = wall_ns / 1e6
        for m in messages:
            if m["attempt"] > 1:
                self.redelivered += 1
                continue
            self.to_log.append(m["delivered_at_ms"] - m["deliver_at_ms"])
            self.to_client.append(arrived_ms - m["deliver_at_ms"])
        self.acker.add(messages[0]["topic"], [m["receipt"] for m in messages])
        if len(self.to_client) >= self.expected:
            self.all_in.set()

    async def wait(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):  # short: the row says how many came
            await asyncio.wait_for(self.all_in.wait(), max(timeout_s, 0.1))


async def _with_acker(port: int, body: Callable[[Acker], Any]) -> Any:
    client = Client(process.HOST, port)
    acker = Acker(client)
    task = asyncio.create_task(acker.run())
    try:
        return await body(acker)
    finally:
        task.cancel()
        client.close()


# --- (a) lateness -------------------------------------------------------------------------


async def _stream_lateness(port: int, pid: int, *, rate: int, seconds: float) -> lateness.Lateness:
    dues, load = await lateness.load_schedule(port, rate=rate, seconds=seconds)

    async def consume(acker: Acker) -> lateness.Lateness:
        arrivals = Arrivals(len(dues), acker)
        stream = await EventStream.open(port, stream_path(lateness.TOPIC), arrivals.on_messages)
        meter = process.CpuMeter(pid)
        try:
            await asyncio.sleep(max(0.0, (dues[0] - loader.now_ms()) / 1e3))
            with meter, process.Profile(pid, "stream-lateness"):
                await arrivals.wait((dues[-1] - loader.now_ms()) / 1e3 + lateness.DRAIN_GRACE_S)
        finally:
            stream.close()
        return lateness.Lateness(
            spread(arrivals.to_log),
            spread(arrivals.to_client),
            len(dues),
            len(arrivals.to_client),
            arrivals.redelivered,
            load.rate,
            meter.describe(),
        )

    result: lateness.Lateness = await _with_acker(port, consume)
    return result


# --- (b) many open streams -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ManyStreams:
    streams: int
    one_rss_kib: int  # one stream open, after its probes
    open_rss_kib: int  # every stream open, after the probes
    one: Spread  # probes with one stream open
    many: Spread  # probes with every stream open
    probes: int


async def _gauge(client: Client, name: str) -> float:
    r = await client.call("GET", "/metrics")
    for line in r.body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise HttpError(f"no {name} in /metrics")


async def _until_parked(client: Client, n: int) -> None:
    deadline = time.monotonic() + PARK_TIMEOUT_S
    while await _gauge(client, "rocktimer_long_polls") < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} streams did not all wait within {PARK_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.05)


@dataclass(slots=True)
class Router:
    """Where the open streams' messages go: the probe round in progress."""

    current: Arrivals | None = None

    def on_messages(self, messages: list[dict[str, Any]], wall_ns: int) -> None:
        if self.current is not None:
            self.current.on_messages(messages, wall_ns)


async def _probe(client: Client, router: Router, acker: Acker, streams: int, probes: int) -> Spread:
    """Send ``probes`` single messages ahead, due PROBE_GAP_MS apart, each to one of the
    first ``streams`` topics at random; their due -> arrival once all came (or timed out)."""
    arrivals = router.current = Arrivals(probes, acker)
    first_due = loader.now_ms() + PROBE_LEAD_MS + probes * 5  # sends take ~1-3 ms each
    picks = random.Random(17).choices(range(streams), k=probes)
    for j, i in enumerate(picks):
        body = {"body": "probe", "deliver_at_ms": first_due + j * PROBE_GAP_MS}
        r = await client.call("POST", f"/v1/topics/{TOPIC_PREFIX}{i}/messages", body)
        if r.status != 201:
            raise HttpError(f"probe send: {r.status} {r.body[:300]!r}")
    if loader.now_ms() >= first_due:
        raise RuntimeError("sending the probes took past the first one's due time")
    last_due = first_due + (probes - 1) * PROBE_GAP_MS
    await arrivals.wait((last_due - loader.now_ms()) / 1e3 + lateness.DRAIN_GRACE_S)
    return spread(arrivals.to_client)


async def _many_streams(port: int, pid: int, *, streams: int, probes: int) -> ManyStreams:
    client, router = Client(process.HOST, port), Router()
    opened: list[EventStream] = []

    async def measure(acker: Acker) -> ManyStreams:
        one_rss = 0
        for i in range(streams):
            path = stream_path(f"{TOPIC_PREFIX}{i}")
            opened.append(await EventStream.open(port, path, router.on_messages))
            if i == 0:  # the ceiling: the same probes with this one stream open
                await _until_parked(client, 1)
                one = await _probe(client, router, acker, 1, probes)
                one_rss = process.status_kib(pid, "VmRSS")
        await _until_parked(client, streams)
        with process.Profile(pid, "many-streams"):
            many = await _probe(client, router, acker, streams, probes)
        return ManyStreams(streams, one_rss, process.status_kib(pid, "VmRSS"), one, many, probes)

    try:
        result: ManyStreams = await _with_acker(port, measure)
        return result
    finally:
        for stream in opened:
            stream.close()
        client.close()


# --- the figure ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamRun:
    ours: lateness.Lateness
    redis: redis_alt.Lateness | str  # the poller's, or why it could not run
    many: ManyStreams
    rate: int
    seconds: float


def _on_fresh_service(body: Callable[[int, int], Coroutine[Any, Any, T]]) -> T:
    """Run ``body(port, pid)`` against the service on a fresh data dir, stopped after."""
    with (
        tempfile.TemporaryDirectory(prefix="rocktimer-bench-stream-") as tmp,
        process.service(Path(tmp)) as service,
    ):
        return run(lambda: body(service.port, service.pid))


def measure(
    *, seconds: float, streams: int, probes: int, rate: int = lateness.RATE_PER_S
) -> StreamRun:
    ours = _on_fresh_service(
        lambda port, pid: _stream_lateness(port, pid, rate=rate, seconds=seconds)
    )
    many = _on_fresh_service(
        lambda port, pid: _many_streams(port, pid, streams=streams, probes=probes)
    )
    binary, why_not = process.redis_server_binary(), redis_alt.unavailable()
    redis: redis_alt.Lateness | str = why_not or ""
    if binary is not None and why_not is None:
        redis = redis_alt.measure_lateness(
            binary, rate=rate, seconds=seconds, load_rate=loader.LOAD_RATE_FLOOR
        )
    return StreamRun(ours, redis, many, rate, seconds)


def run_figure(
    *, seconds: float, streams: int, probes: int, rate: int = lateness.RATE_PER_S
) -> list[report.Row]:
    measured = measure(seconds=seconds, streams=streams, probes=probes, rate=rate)
    return [*rows(measured), stalls.measured_row("18", seconds)]


def rows(run_: StreamRun) -> list[report.Row]:
    ours, redis, many = run_.ours, run_.redis, run_.many
    complete = ours.received == ours.expected
    counts = f"{ours.received:,}/{ours.expected:,} received"
    if ours.redelivered:
        counts += f", {ours.redelivered} redelivered"
    late = ours.to_consumer
    if isinstance(redis, str):
        ceiling, ratio, beats = redis, "n/a", True
    else:
        ceiling = f"Redis Lua poller {redis.to_receiver.ms(1)}"
        ratio = (
            f"p99 x{late.p99 / redis.to_receiver.p99:.2f} Redis" if redis.to_receiver.p99 else "n/a"
        )
        beats = late.p99 <= redis.to_receiver.p99
        counts += f"; Redis {redis.received:,}/{redis.expected:,} popped"
    one_mib, open_mib = many.one_rss_kib / 1024, many.open_rss_kib / 1024
    probes_in = f"{many.many.n:,}/{many.probes:,} probes arrived (one stream: {many.one.n:,})"
    return [
        report.Row(
            "18",
            f"due -> stream consumer, {run_.rate:,} timers/s for {run_.seconds:.0f} s",
            late.ms(1),
            ceiling,
            ratio,
            f"p99 <= Redis p99, max <= {MAX_TARGET_MS:.0f} ms",
            beats and late.max <= MAX_TARGET_MS and complete,
            f"{counts}; due -> topic log {ours.to_log.ms(0)}; {ours.cpu}",
        ),
        report.Row(
            "18",
            f"server memory with {many.streams:,} streams open",
            f"{open_mib:,.0f} MiB",
            f"the same server with one open: {one_mib:,.0f} MiB",
            report.ratio(open_mib, one_mib),
            f"< {RSS_TARGET_MIB} MiB",
            open_mib < RSS_TARGET_MIB,
            f"{(many.open_rss_kib - many.one_rss_kib) / max(many.streams - 1, 1):,.0f} KiB "
            "per stream beyond the first",
        ),
        report.Row(
            "18",
            f"due -> arrival on one of {many.streams:,} open streams",
            many.many.ms(1),
            f"one stream open: {many.one.ms(1)}",
            f"p99 x{many.many.p99 / many.one.p99:.2f}" if many.one.p99 > 0 else "n/a",
            f"p99 <= {PROBE_TARGET_P99_MS:.0f} ms",
            many.many.p99 <= PROBE_TARGET_P99_MS and many.many.n == many.probes,
            probes_in,
        ),
    ]


def main() -> None:
    s = scale.current()
    figure = run_figure(seconds=s.stream_seconds, streams=s.streams_open, probes=s.stream_probes)
    print(report.table(figure, s.name))


if __name__ == "__main__":
    main()
