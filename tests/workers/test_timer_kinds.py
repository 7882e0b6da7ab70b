"""Timer kinds (workers/timers/): each kind's key codec round-trips, and the span move's
table sends every key to its own kind, a topic that merely starts with % included."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage import keys
from storage.errors import CorruptRecordError
from tests.storage.strategies import dues, msg_ids, names, relaxed, u64s
from workers.ops import consume, messages
from workers.ops.move import kind_of
from workers.timers import hold, invisible, message, retry


@relaxed
@given(due=dues, topic=names, msg_id=msg_ids)
def test_message_timer_key_round_trip(due: int, topic: str, msg_id: str) -> None:
    key = message.timer_key(due, topic, msg_id)
    assert keys.decode_timer_key(key) == keys.TimerKey(due, topic, msg_id.encode())
    assert key == message.timer_key_of(due, keys.message_key(topic, msg_id))


@relaxed
@given(due=dues, topic=names, group=names, seq=u64s, generation=u64s)
def test_group_timer_keys_round_trip(
    due: int, topic: str, group: str, seq: int, generation: int
) -> None:
    timer = hold.GroupTimer(topic, group, seq, generation)
    fire_runs = {invisible: consume.end_invisibility_run, retry: consume.end_retry_wait_run}
    for kind, fire_run in fire_runs.items():
        key = kind.timer_key(due, timer)
        assert keys.decode_timer_key(key).due_ms == due
        assert keys.decode_timer_key(key).target == kind.PREFIX + group
        assert hold.decode(kind.PREFIX, key) == timer
        assert kind_of(key) is fire_run


def test_group_timer_with_zero_bytes_in_seq_and_generation() -> None:
    # seq/generation are binary and full of 0x00: decoding must split on the first separator.
    timer = hold.GroupTimer("t", "g", 0, 1 << 56)
    assert hold.decode(invisible.PREFIX, invisible.timer_key(0, timer)) == timer


def test_an_undecodable_group_timer_raises_corrupt_record() -> None:
    with pytest.raises(CorruptRecordError):
        hold.decode(retry.PREFIX, keys.timer_key(1, retry.PREFIX + "g", b"no-separator"))
    with pytest.raises(CorruptRecordError):  # a lot's seqs cut short
        hold.lot_seqs(hold.GroupTimer("t", "g", 0, 1), hold.lot_value([1, 2])[:-1])


@relaxed
@given(seqs=st.lists(u64s, min_size=1, max_size=300))
def test_a_lot_timer_carries_every_seq(seqs: list[int]) -> None:
    timer = hold.GroupTimer("t", "g", seqs[0], 7)
    assert hold.lot_seqs(timer, hold.lot_value(seqs[1:])) == seqs


@pytest.mark.parametrize("topic", ["t", "%", "%R", "%RETRY", "%INVISIBLE", "a%RETRY%"])
def test_every_other_target_is_a_message(topic: str) -> None:
    assert kind_of(message.timer_key(5, topic, "m")) is messages.fire_run
