"""One partition's replication, driven in-process or in a child process of its own: a Bus on
real NATS servers, a Replica, and the Engine the owner opens on its copy.

``python -m tests.cluster.replica_support URLS PATH NODE LEASE_MS`` is an owner process:
it takes partition 0 over, opens the engine and sends messages from a few concurrent
producers, printing ``ok <msg_id>`` once a send is answered (its record acknowledged) and
``refused <msg_id> <error>`` when not, until killed (or MAX_SENDS).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from app.cluster.replica import Bus, LeaseHeld, Replica
from storage.errors import MessageNotFound, RocktimerError
from storage.keys import CHANGELOG_EPOCH_KEY, CHANGELOG_SEQ_KEY, OWNED_MARK_KEY
from storage.records import MessageRecord
from storage.store import CF, RocksStore
from workers.engine import Engine, EngineConfig

K = 0  # the partition these tests replicate
TOPIC = "orders"
PRODUCERS = 4
MAX_SENDS = 50_000
FAR_FUTURE_MS = 4_000_000_000_000  # never due during a test
NODE_LOCAL = {CHANGELOG_SEQ_KEY, CHANGELOG_EPOCH_KEY, OWNED_MARK_KEY}  # not replicated


def record(msg_id: str, body: bytes = b"body", deliver_at_ms: int = FAR_FUTURE_MS) -> MessageRecord:
    return MessageRecord(
        topic=TOPIC, msg_id=msg_id, deliver_at_ms=deliver_at_ms, created_at_ms=0, body=body
    )


def engine_config(path: str) -> EngineConfig:
    return EngineConfig(data_dir=path, events_seal_process=False)


def has(engine: Engine, msg_id: str) -> bool:
    """Whether the engine's store holds the message (sent, not cancelled)."""
    try:
        return engine.status(TOPIC, msg_id).record is not None
    except MessageNotFound:
        return False


def take_over(replica: Replica, timeout_s: float) -> Any:
    """``replica.take_over()``, retried while another node's lease is still running."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return replica.take_over()
        except LeaseHeld:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def dump(store: RocksStore) -> Iterator[tuple[str, bytes, bytes]]:
    """Every entry of every column family but the node-local changelog keys."""
    for cf in CF.ALL:
        for key, value in store.scan(cf, b"", b"\xff" * 64, 10**9):
            if cf == CF.META and key in NODE_LOCAL:
                continue
            yield cf, key, value


class Loop:
    """An event loop on a thread of its own, for the engine's async calls from a test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout_s: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


_said = threading.Lock()


def say(line: str) -> None:
    """One line on stdout, whole: ``print`` writes the text and the newline apart, so two
    threads printing at once (a producer and the deposed callback) could splice lines."""
    with _said:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


async def produce(engine: Engine, first: int, step: int) -> None:
    for i in range(first, MAX_SENDS, step):
        msg_id = f"m{i}"
        try:
            await engine.send(record(msg_id))
            say(f"ok {msg_id}")
        except RocktimerError as exc:
            say(f"refused {msg_id} {type(exc).__name__}")
            await asyncio.sleep(0.01)


def main() -> None:
    urls, path, node, lease_ms = sys.argv[1:5]
    bus = Bus.start(urls.split(","), replicas=3, lease_ms=int(lease_ms))
    replica = Replica(
        bus,
        K,
        path,
        node_id=node,
        advertise="127.0.0.1:1",
        on_deposed=lambda k: say(f"deposed p{k}"),
    )
    changelog = take_over(replica, 30.0)
    engine = Engine(engine_config(path), changelog=changelog)
    engine.start()
    say(f"owner {changelog.last}")

    async def producers() -> None:
        await asyncio.gather(*(produce(engine, i, PRODUCERS) for i in range(PRODUCERS)))

    asyncio.run(producers())


if __name__ == "__main__":
    main()
