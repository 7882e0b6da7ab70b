"""A partition's changelog on JetStream against the same engine without one: single sends
and batch sends answered by an owner whose every group commit is appended to a 3-server
JetStream cluster, with the servers' default fsync policy and with ``sync_interval:
always``, beside the engine alone (one machine), in alternating rounds.

Each side is an Engine in this process on a temp dir; the cluster sides take partition 0
over first (app/cluster/replica/). A round gives each side, in turn (the order rotating),
a window of single sends from PRODUCERS concurrent producers, then a window of batch sends
of BATCH; the figures are each side's rate, its reply latency (p50/p99), and its ratio to
the engine alone (the median of the rounds' ratios). For the cluster sides also the
records appended and a record's publish-to-ack time (mean; the bucket of the p99).

With ``--rebuild N``: the rebuild of a partition holding N batch sends of BATCH messages,
from the stream alone (a standby reading every record from the first) beside the same copy
restored from a snapshot (app/cluster/replica/snapshot.py), in alternating rounds.

    python -m bench.changelog                 # ROUNDS rounds
    python -m bench.changelog --rounds 3 --window 0.5
    python -m bench.changelog --rebuild 50 --rounds 3
    python -m bench.changelog --rebuild 50 --rounds 3 --churn   # delivered and swept
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from app.cluster.replica import Bus, Replica, snapshot
from app.cluster.replica.standby import Standby
from bench.stats import percentile
from storage.records import MessageRecord
from storage.store import RocksStore
from tests.support.nats import NatsCluster
from workers.engine import Engine, EngineConfig

ROUNDS = 6
WINDOW_S = 1.0
PRODUCERS = 16  # concurrent single senders (group commit gathers them)
BATCH = 1000
BODY_BYTES = 100  # random: as little compressible as real payloads
FAR_MS = 4_000_000_000_000  # never due during the bench
LEASE_MS = 4000
CHURN_RETENTION_MS = 500  # --churn: delivered messages swept this soon


@dataclass(slots=True)
class Window:
    sent: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0


@dataclass(slots=True)
class Side:
    name: str
    engine: Engine
    replica: Replica | None = None
    bus: Bus | None = None
    single: list[Window] = field(default_factory=list)
    batch: list[Window] = field(default_factory=list)

    def close(self) -> None:
        self.engine.stop()
        if self.replica is not None:
            self.replica.close()
        if self.bus is not None:
            self.bus.close()


def _record(n: int, prefix: str) -> MessageRecord:
    return MessageRecord(
        topic="bench",
        msg_id=f"{prefix}{n}",
        deliver_at_ms=FAR_MS,
        created_at_ms=0,
        body=os.urandom(BODY_BYTES),
    )


async def _singles(side: Side, window_s: float, tag: str) -> Window:
    out = Window()
    stop_at = time.perf_counter() + window_s
    counter = itertools.count()

    async def producer() -> None:
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            await side.engine.send(_record(next(counter), tag))
            out.latencies.append(time.perf_counter() - started)
            out.sent += 1

    started = time.perf_counter()
    await asyncio.gather(*(producer() for _ in range(PRODUCERS)))
    out.seconds = time.perf_counter() - started
    return out


async def _batches(side: Side, window_s: float, tag: str) -> Window:
    out = Window()
    stop_at = time.perf_counter() + window_s
    started = time.perf_counter()
    for i in itertools.count():
        if time.perf_counter() >= stop_at:
            break
        t = time.perf_counter()
        await side.engine.send_batch([_record(n, f"{tag}b{i}-") for n in range(BATCH)])
        out.latencies.append(time.perf_counter() - t)
        out.sent += BATCH
    out.seconds = time.perf_counter() - started
    return out


def _owner(root: Path, name: str, urls: str | None, churn: bool = False) -> Side:
    path = str(root / name / "p0")
    config = EngineConfig(data_dir=path, events_seal_process=False)
    if churn:
        config = replace(
            config, retention_ms=CHURN_RETENTION_MS, sweep_interval_ms=CHURN_RETENTION_MS
        )
    if urls is None:
        engine = Engine(config)
        engine.start()
        return Side(name, engine)
    bus = Bus.start(urls.split(","), replicas=3, lease_ms=LEASE_MS)
    replica = Replica(
        bus, 0, path, node_id=name, advertise="127.0.0.1:1", on_deposed=lambda k: None
    )
    changelog = replica.take_over()
    engine = Engine(config, changelog=changelog)
    engine.start()
    return Side(name, engine, replica, bus)


def _line(side: Side, base: Side) -> str:
    def figures(windows: list[Window], bases: list[Window]) -> str:
        sent = sum(w.sent for w in windows)
        secs = sum(w.seconds for w in windows)
        lat = sorted(x for w in windows for x in w.latencies)
        ratios = [w.rate / b.rate for w, b in zip(windows, bases, strict=True) if b.rate]
        ratio = statistics.median(ratios) if ratios else 0.0
        return (
            f"{sent / secs:8.0f}/s  p50 {percentile(lat, 50) * 1e3:6.2f} ms  "
            f"p99 {percentile(lat, 99) * 1e3:7.2f} ms  x{ratio:.2f}"
        )

    text = (
        f"{side.name:9} single {figures(side.single, base.single)} | "
        f"batch {figures(side.batch, base.batch)}"
    )
    if side.replica is not None and side.replica.changelog is not None:
        c = side.replica.changelog
        hist = c.append_seconds
        n = hist.count
        mean = hist.snapshot()[1] / n if n else 0.0
        text += (
            f" | {c.records} records for {c.appends} commits, append mean {mean * 1e3:.2f} ms,"
            f" p99 <= {(hist.quantile(0.99) or 0) * 1e3:.1f} ms"
        )
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--window", type=float, default=WINDOW_S)
    parser.add_argument("--rebuild", type=int, default=0, metavar="N")
    parser.add_argument("--churn", action="store_true", help="rebuild: messages delivered")
    args = parser.parse_args()
    if args.rebuild:
        rebuild(args.rebuild, args.rounds, args.churn)
        return
    with tempfile.TemporaryDirectory(prefix="rt-changelog-") as tmp:
        root = Path(tmp)
        with (
            NatsCluster(root / "nats-default") as default,
            NatsCluster(root / "nats-always", sync_interval="always") as always,
        ):
            sides = [
                _owner(root, "local", None),
                _owner(root, "default", default.urls),
                _owner(root, "always", always.urls),
            ]
            try:
                asyncio.run(_rounds(sides, args.rounds, args.window))
                print(f"{args.rounds} rounds of {args.window} s windows, {PRODUCERS} producers")
                for side in sides:
                    print(_line(side, sides[0]))
            finally:
                for side in sides:
                    side.close()


async def _rounds(sides: list[Side], rounds: int, window_s: float) -> None:
    for r in range(rounds):
        order = sides[r % len(sides) :] + sides[: r % len(sides)]
        singles = {s.name: await _singles(s, window_s, f"r{r}s") for s in order}
        batches = {s.name: await _batches(s, window_s, f"r{r}") for s in order}
        for s in sides:
            s.single.append(singles[s.name])
            s.batch.append(batches[s.name])


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def _churn(engine: Engine, batch: int, tag: str) -> None:
    """Messages due now, delivered, received and acked: history the copy does not keep
    (the sweeper drops delivered messages after CHURN_RETENTION_MS)."""
    now = int(time.time() * 1000)
    await engine.send_batch(
        [
            MessageRecord(
                topic="bench",
                msg_id=f"{tag}{n}",
                deliver_at_ms=now,
                created_at_ms=0,
                body=os.urandom(BODY_BYTES),
            )
            for n in range(batch)
        ]
    )
    got = 0
    deadline = time.monotonic() + 60
    while got < batch and time.monotonic() < deadline:
        received = await engine.receive("bench", "work", 1000, 1000, 30_000)
        await engine.ack("bench", "work", [r.receipt for r in received])
        got += len(received)


def rebuild(batches: int, rounds: int, churn: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="rt-rebuild-") as tmp:
        root = Path(tmp)
        with NatsCluster(root / "nats") as cluster:
            owner = _owner(root, "owner", cluster.urls, churn)
            assert owner.bus is not None
            assert owner.replica is not None
            bus = owner.bus

            async def fill() -> None:
                for i in range(batches):
                    if churn:
                        await _churn(owner.engine, BATCH, f"c{i}-")
                    else:
                        await owner.engine.send_batch([_record(n, f"f{i}-") for n in range(BATCH)])
                if churn:  # the sweeper's passes over what was delivered
                    await asyncio.sleep(4 * CHURN_RETENTION_MS / 1000)

            try:
                asyncio.run(fill())
                changelog = owner.replica.changelog
                assert changelog is not None
                last = changelog.last
                records = changelog.records
                # The snapshot of a standby's copy, stored under another partition's name
                # (partition 0's records stay: the replay rounds read them all).
                first = Standby(bus, 0, str(root / "first"), snapshot_every=10**12)
                first.wait_applied(last, 600)
                seq = first.applied
                tar = snapshot.pack(snapshot.take(first.store, str(root)), seq, str(root))
                bus.call(snapshot.upload(bus, 1, tar, seq), 600)
                first.close()
                replay: list[float] = []
                restore: list[float] = []
                for r in range(rounds):
                    for kind in ("replay", "restore") if r % 2 == 0 else ("restore", "replay"):
                        path = root / f"{kind}{r}"
                        started = time.perf_counter()
                        if kind == "replay":
                            standby = Standby(bus, 0, str(path), snapshot_every=10**12)
                            standby.wait_applied(last, 600)
                            replay.append(time.perf_counter() - started)
                            standby.close()
                        else:
                            snapshot.restore(bus, 1, str(path))
                            RocksStore(str(path)).close()
                            restore.append(time.perf_counter() - started)
                size = _du(root / "first")
                messages = batches * BATCH
                rp, rs = statistics.median(replay), statistics.median(restore)
                what = "sent, delivered, acked and swept" if churn else "pending"
                print(
                    f"rebuild after {messages} messages {what} ({records} records,"
                    f" copy {size / 1e6:.1f} MB), median of {rounds} rounds:"
                )
                print(
                    f"  from the stream:   {rp:6.2f} s  {records / rp:8.0f} records/s"
                    f"  {messages / rp:8.0f} messages/s"
                )
                print(
                    f"  from the snapshot: {rs:6.2f} s  {size / rs / 1e6:8.1f} MB/s"
                    f"  {messages / rs:8.0f} messages/s  (x{rp / rs:.1f} faster)"
                )
            finally:
                owner.close()


if __name__ == "__main__":
    main()
