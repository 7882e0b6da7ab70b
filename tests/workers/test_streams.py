"""The stream registry: which stream handed out each receipt, what frees a slot, and
that nothing of a stream is kept once it closes."""

from __future__ import annotations

import asyncio

from workers.streams import Streams


def test_a_slot_per_receipt_until_it_is_settled() -> None:
    async def scenario() -> None:
        streams = Streams()
        with streams.open(2) as one, streams.open(2) as two:
            streams.hand_out(one, "r1", 100)
            streams.hand_out(one, "r2", 100)
            streams.hand_out(two, "r3", 100)
            assert (one.free, two.free) == (0, 1)
            streams.settled(["r2", "unknown", "r2"])  # a repeated or foreign receipt: nothing
            assert (one.free, two.free) == (1, 1)
            assert one.freed.is_set()
            assert not two.freed.is_set()

    asyncio.run(scenario())


def test_expiry_frees_in_deadline_order_and_renewal_keeps_the_slot() -> None:
    async def scenario() -> None:
        streams = Streams()
        with streams.open(3) as s:
            streams.hand_out(s, "a", 100)
            streams.hand_out(s, "b", 200)
            streams.renewed("a", "a2", 300)
            assert (s.free, s.next_expiry()) == (1, 200)
            streams.expire(s, 199)
            assert s.free == 1
            streams.expire(s, 200)
            assert (list(s.held), s.next_expiry()) == (["a2"], 300)
            streams.settled(["a"])  # the replaced receipt no longer holds the slot
            assert s.free == 2
            streams.settled(["a2"])
            assert s.free == 3

    asyncio.run(scenario())


def test_a_closed_stream_leaves_nothing_and_close_wakes_every_stream() -> None:
    async def scenario() -> None:
        streams = Streams()
        with streams.open(5) as gone:
            streams.hand_out(gone, "x", 100)
        assert len(streams) == 0
        assert streams._owner == {}
        streams.settled(["x"])
        with streams.open(1) as s:
            streams.close()
            assert streams.closed
            assert s.freed.is_set()

    asyncio.run(scenario())
