"""A push group keeps POSTing while the acks of answered messages wait for their fsync
(app/push/pusher.py, SETTLING_MAX): receiving stopped at 2 x max_in_flight held, so every fsync
longer than that many messages' worth of time made the next webhooks late (figure 17)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.push import pusher as push_module
from app.push.pusher import Pusher
from tests.e2e.receiver import Receiver
from tests.workers.conftest import EngineFactory
from tests.workers.support import WAIT_S, record, run, wait_until
from workers.clock import FakeClock
from workers.rules.retry import GroupSettings
from workers.rules.webhook import PushSettings

IN_FLIGHT = 4
MESSAGES = 60  # well over 2 x IN_FLIGHT, under IN_FLIGHT + SETTLING_MAX
SETTLING = 100


def test_posts_go_on_while_the_acks_of_answered_ones_wait_for_their_fsync(
    make_engine: EngineFactory, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(push_module, "SETTLING_MAX", SETTLING)
    engine = make_engine()
    engine.start()
    fsync_open = threading.Event()
    sync_wal = engine.store.sync_wal

    def held_fsync() -> None:  # every fsync waits until the test lets it through
        fsync_open.wait(WAIT_S)
        sync_wal()

    def inflight() -> int:
        (summary,), _ = engine.groups("t", None, 10)
        return summary.inflight

    with Receiver() as receiver:

        async def scenario() -> None:
            settings = GroupSettings(
                push=PushSettings(url=receiver.url("/ok"), max_in_flight=IN_FLIGHT)
            )
            await engine.put_group_settings("t", "g", settings)
            for i in range(MESSAGES):
                await engine.send(record("t", f"m{i}", clock.now_ms()))
            monkeypatch.setattr(engine.store, "sync_wal", held_fsync)
            pusher = Pusher(engine, frozenset({"127.0.0.1"}))
            pusher.start()
            try:
                # Every message is POSTed though none of the acks can commit yet.
                tally = pusher.tallies["t", "g"]
                await asyncio.to_thread(wait_until, lambda: tally.ok == MESSAGES)  # answered
                assert inflight() > 2 * IN_FLIGHT  # more than the old bound, unsettled
                fsync_open.set()
                await asyncio.to_thread(wait_until, lambda: inflight() == 0)
            finally:
                fsync_open.set()
                await pusher.stop()

        run(scenario())
    assert len({hit.msg_id for hit in receiver.of("/ok")}) == MESSAGES
