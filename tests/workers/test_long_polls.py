"""Long polls: a receiver that found nothing parks; the commit that delivers to its topic
runs its receive on the writer thread. Nothing is ever held for a receiver that is gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import cast

from tests.workers.conftest import EngineFactory
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


async def _drain_by_a_served_receive(engine: Engine, msg_id: str) -> list[Received]:
    """A long poll parks, a message is delivered: its receive, served by the batch that
    woke the topic, reads the group to the end."""
    poll = asyncio.create_task(_long_poll(engine, 10_000))
    await asyncio.to_thread(wait_until, lambda: engine.long_polls.waiting == 1)
    await _deliver(engine, msg_id)
    got = await poll
    assert [g.record.msg_id for g in got] == [msg_id]
    return got


def test_a_poll_on_a_group_its_served_receive_drained_parks_without_a_look(
    engine: Engine,
) -> None:
    """A stream's next receive right after its messages went out, or a polling consumer's
    next request: nothing can have become visible since the served receive read the group
    to the end unless a batch woke the topic, so it parks without a batch of its own."""

    async def scenario() -> list[Received]:
        await _drain_by_a_served_receive(engine, "m")
        batches = engine.writer.batches
        poll = asyncio.create_task(_long_poll(engine, 10_000))
        await asyncio.to_thread(wait_until, lambda: engine.long_polls.waiting == 1)
        assert engine.writer.batches == batches  # no look: parked at once
        await _deliver(engine, "n")
        return await poll

    assert [g.record.msg_id for g in run(scenario())] == ["n"]
    assert engine.long_polls.parked_unlooked == 1


def test_a_wake_while_no_one_waits_makes_the_next_poll_look(engine: Engine) -> None:
    async def scenario() -> list[Received]:
        await _drain_by_a_served_receive(engine, "m")
        await _deliver(engine, "n")  # nobody parked: the wake forgets the drained group
        return await _long_poll(engine, 10_000)

    assert [g.record.msg_id for g in run(scenario())] == ["n"]
    assert engine.long_polls.parked_unlooked == 0


def test_a_nacked_message_is_received_after_the_group_was_drained(engine: Engine) -> None:
    async def scenario() -> list[Received]:
        got = await _drain_by_a_served_receive(engine, "m")
        assert await engine.nack("t", "g", [got[0].receipt], 0) == ["nacked"]
        return await _long_poll(engine, 10_000)

    again = run(scenario())
    assert [(g.record.msg_id, g.attempt) for g in again] == [("m", 2)]


def test_a_served_receive_cut_short_by_the_reply_size_leaves_the_rest_visible(
    make_engine: EngineFactory,
) -> None:
    """Two messages, room in a reply for one: the served receive did not read the group to
    the end, and the next poll takes the other at once."""
    engine = make_engine(max_receive_bytes=600)
    engine.start()
    body = b"x" * 300

    async def scenario() -> tuple[list[Received], list[Received]]:
        poll = asyncio.create_task(_long_poll(engine, 10_000))
        await asyncio.to_thread(wait_until, lambda: engine.long_polls.waiting == 1)
        now = engine.clock.now_ms()
        assert await engine.send_batch([record("t", m, now, body) for m in ("a", "b")])
        first = await poll
        return first, await asyncio.wait_for(_long_poll(engine, 10_000), 5)

    first, second = run(scenario())
    assert [g.record.msg_id for g in first + second] == ["a", "b"]


def test_a_stream_parks_again_without_a_look_after_its_messages_went_out(
    engine: Engine,
) -> None:
    async def scenario() -> list[list[str]]:
        stream = cast(
            AsyncGenerator[list[Received], None],
            engine.stream("t", "g", INVISIBLE_MS, 100, 60_000),
        )
        first = asyncio.ensure_future(anext(stream))
        await asyncio.to_thread(wait_until, lambda: engine.long_polls.waiting == 1)
        await _deliver(engine, "m")
        got = [[g.record.msg_id for g in await first]]
        batches = engine.writer.batches
        second = asyncio.ensure_future(anext(stream))
        await asyncio.to_thread(wait_until, lambda: engine.long_polls.waiting == 1)
        assert engine.writer.batches == batches  # parked at once, no batch to look
        await _deliver(engine, "n")
        got.append([g.record.msg_id for g in await second])
        await stream.aclose()
        return got

    assert run(scenario()) == [["m"], ["n"]]
