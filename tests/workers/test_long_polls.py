"""Long polls: a receiver that found nothing parks; the commit that delivers to its topic
runs its receive on the writer thread. Nothing is ever held for a receiver that is gone."""

from __future__ import annotations

import asyncio

from tests.workers.support import record, run, wait_until
from workers.clock import FakeClock
from workers.engine import Engine
from workers.notify import LongPolls, Parked
from workers.ops.consume import Received

INVISIBLE_MS = 30_000


async def _long_poll(engine: Engine, wait_ms: int, topic: str = "t") -> list[Received]:
    return await engine.receive(topic, "g", 10, wait_ms, INVISIBLE_MS)


async def _deliver(engine: Engine, msg_id: str, topic: str = "t") -> None:
    await engine.send(record(topic, msg_id, engine.clock.now_ms()))


def test_parked_receive_gets_the_message_delivered_while_it_waits(engine: Engine) -> None:
    async def scenario() -> list[Received]:
        poll = asyncio.create_task(_long_poll(engine, 10_000))
        await asyncio.to_thread(wait_until, lambda: engine.long_polls.waiting == 1)
        await _deliver(engine, "m")
        return await poll

    got = run(scenario())
    assert [g.record.msg_id for g in got] == ["m"]
    assert engine.long_polls.waiting == 0
    assert engine.writer.follow_ups_run >= 1  # served on the writer thread, not re-polled


def test_a_poll_that_times_out_leaves_nothing_parked_and_holds_nothing(
    engine: Engine, clock: FakeClock
) -> None:
    async def scenario() -> tuple[list[Received], list[Received]]:
        poll = asyncio.create_task(_long_poll(engine, 50))
        await asyncio.to_thread(wait_until, lambda: engine.long_polls.waiting == 1)
        clock.advance(50)  # the deadline is on the engine's clock
        empty = await poll
        await _deliver(engine, "later")
        return empty, await _long_poll(engine, 0)

    empty, later = run(scenario())
    assert empty == []
    assert engine.long_polls.waiting == 0
    assert [g.record.msg_id for g in later] == ["later"]  # nobody held it


def test_a_receiver_that_went_away_holds_nothing(engine: Engine) -> None:
    async def scenario() -> list[Received]:
        poll = asyncio.create_task(_long_poll(engine, 10_000))
        await asyncio.to_thread(wait_until, lambda: engine.long_polls.waiting == 1)
        poll.cancel()  # the client disconnected
        await asyncio.gather(poll, return_exceptions=True)
        await _deliver(engine, "m")
        return await _long_poll(engine, 0)

    got = run(scenario())
    assert [g.record.msg_id for g in got] == ["m"]
    assert engine.long_polls.waiting == 0


def test_two_parked_receivers_share_a_message_once_and_the_other_waits_on(
    engine: Engine, clock: FakeClock
) -> None:
    async def scenario() -> list[list[Received]]:
        polls = [asyncio.create_task(_long_poll(engine, 1_000)) for _ in range(2)]
        await asyncio.to_thread(wait_until, lambda: engine.long_polls.waiting == 2)
        await _deliver(engine, "one")
        await asyncio.to_thread(wait_until, lambda: sum(p.done() for p in polls) == 1)
        assert engine.long_polls.waiting == 1  # the other waits on, until its deadline
        clock.advance(1_000)
        return list(await asyncio.gather(*polls))

    results = run(scenario())
    assert sorted(len(r) for r in results) == [0, 1]  # one got it; the other timed out empty
    assert engine.long_polls.waiting == 0


def test_long_polls_claim_or_cancel_exactly_once() -> None:
    loop = asyncio.new_event_loop()
    try:
        polls = LongPolls()
        first, second, late = (Parked("t", lambda txn: [], loop.create_future()) for _ in range(3))
        polls.park(first)
        polls.park(second)
        assert polls.waiting == 2
        assert polls.claim(["other"]) == []
        assert polls.cancel(second)  # still waiting: cancelled, never run
        assert polls.claim(["t"]) == [first]
        assert not polls.cancel(first)  # claimed: its result is coming
        assert polls.waiting == 0
        assert polls.cancel(late)  # cancelled before its look parked it …
        polls.park(late)  # … so the look's park does nothing
        assert polls.waiting == 0
        assert polls.claim(["t"]) == []
    finally:
        loop.close()


def test_a_long_poll_ends_on_the_engines_clock_not_before(engine: Engine, clock: FakeClock) -> None:
    async def scenario() -> list[Received]:
        poll = asyncio.create_task(_long_poll(engine, 100))
        # Its wait for a commit is 100 ms of real time; once that ran out (it looked and
        # parked again) the clock, not the real time, says whether it is over.
        await asyncio.to_thread(wait_until, lambda: engine.long_polls.parks >= 3)
        assert not poll.done()
        clock.advance(100)
        return await poll

    assert run(scenario()) == []
    assert engine.long_polls.waiting == 0


def test_the_services_own_long_polls_are_not_counted(engine: Engine) -> None:
    """Issue 30.17: a webhook's receive loop parks like a client's long poll; the gauge and
    the console count clients only."""

    async def scenario() -> None:
        own = asyncio.create_task(engine.receive("t", "hook", 10, 10_000, INVISIBLE_MS, own=True))
        client = asyncio.create_task(_long_poll(engine, 10_000, topic="u"))
        parked = engine.long_polls._parked  # both parked: what the count leaves out
        await asyncio.to_thread(wait_until, lambda: sum(map(len, parked.values())) == 2)
        assert engine.long_polls.waiting == 1
        await _deliver(engine, "m")
        await _deliver(engine, "n", topic="u")
        await asyncio.gather(own, client)

    run(scenario())
    assert engine.long_polls.waiting == 0
