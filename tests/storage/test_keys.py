"""The key codec: byte order is scan order, every key decodes to what was encoded."""

from __future__ import annotations

import struct

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from storage import keys
from tests.storage.strategies import dues, msg_ids, names, relaxed, short_ids, short_names, u64s
from workers.timers import message

timer_tuples = st.tuples(dues, st.one_of(names, short_names), st.one_of(msg_ids, short_ids))


@relaxed
@given(a=timer_tuples, b=timer_tuples)
def test_timer_key_byte_order_is_due_topic_msg_id_order(
    a: tuple[int, str, str], b: tuple[int, str, str]
) -> None:
    ka, kb = message.timer_key(*a), message.timer_key(*b)
    assert (ka < kb) == (a < b)
    assert (ka == kb) == (a == b)


@relaxed
@given(st.lists(timer_tuples, min_size=2, max_size=30))
def test_sorting_timer_keys_sorts_by_due_then_topic_then_msg_id(
    items: list[tuple[int, str, str]],
) -> None:
    by_key = sorted(items, key=lambda t: message.timer_key(*t))
    assert by_key == sorted(items)


def test_separator_sorts_before_every_allowed_character() -> None:
    # A topic that is a prefix of another sorts first, whatever follows the separator.
    short = message.timer_key(5, "ab", "zzzz")
    long = message.timer_key(5, "ab%", "0")
    assert short < long
    assert message.timer_key(4, "zz", "z") < message.timer_key(5, "%", "-")


@relaxed
@given(due=dues, topic=names, msg_id=msg_ids)
def test_message_timer_key_round_trip(due: int, topic: str, msg_id: str) -> None:
    decoded = keys.decode_timer_key(message.timer_key(due, topic, msg_id))
    assert decoded == keys.TimerKey(due, topic, msg_id.encode())


@relaxed
@given(due=u64s, topic=names, msg_id=msg_ids)
def test_due_bound_splits_timers_by_due(due: int, topic: str, msg_id: str) -> None:
    key = message.timer_key(due, topic, msg_id)
    assert keys.due_bound(due) <= key  # due >= bound's due: at or after the bound
    if due < 2**64 - 1:
        assert key < keys.due_bound(due + 1)  # the scanner's exclusive end for "<= due"


def test_due_bound_clamps_past_u64() -> None:
    assert keys.due_bound(2**64 + 5) == b"\xff" * 8


@relaxed
@given(key=st.binary(max_size=20), other=st.binary(max_size=21))
def test_successor_is_the_next_key(key: bytes, other: bytes) -> None:
    nxt = keys.successor(key)
    assert key < nxt
    if other > key:
        assert nxt <= other  # nothing fits strictly between a key and its successor


@relaxed
@given(lane_topic=names, seq=u64s)
def test_log_key_round_trip_and_stays_in_its_lane(lane_topic: str, seq: int) -> None:
    lane = keys.topic_lane(lane_topic)
    key = keys.log_key(lane, seq)
    assert keys.log_seq(key) == seq
    assert lane <= key < keys.prefix_end(lane)


@relaxed
@given(topic=names, a=u64s, b=u64s)
def test_log_keys_sort_by_seq(topic: str, a: int, b: int) -> None:
    lane = keys.topic_lane(topic)
    assert (keys.log_key(lane, a) < keys.log_key(lane, b)) == (a < b)


@relaxed
@given(a=st.one_of(names, short_names), b=st.one_of(names, short_names), seq=u64s)
def test_one_topics_log_is_outside_another_topics_lane(a: str, b: str, seq: int) -> None:
    assume(a != b)
    lane_b = keys.topic_lane(b)
    key_a = keys.log_key(keys.topic_lane(a), seq)
    assert not (lane_b <= key_a < keys.prefix_end(lane_b))


@relaxed
@given(topic=names, group=names, seq=u64s)
def test_retry_lane_is_outside_the_topic_lane(topic: str, group: str, seq: int) -> None:
    lane = keys.topic_lane(topic)
    key = keys.log_key(keys.retry_lane(topic, group), seq)
    assert keys.log_seq(key) == seq
    assert not (lane <= key < keys.prefix_end(lane))


@relaxed
@given(a=st.tuples(short_names, short_ids), b=st.tuples(short_names, short_ids))
def test_message_key_identifies_topic_and_msg_id(a: tuple[str, str], b: tuple[str, str]) -> None:
    assert (keys.message_key(*a) == keys.message_key(*b)) == (a == b)


@relaxed
@given(
    a=st.tuples(short_names, short_names, u64s),
    b=st.tuples(short_names, short_names, u64s),
)
def test_inflight_key_identifies_topic_group_seq(
    a: tuple[str, str, int], b: tuple[str, str, int]
) -> None:
    assert (keys.inflight_key(*a) == keys.inflight_key(*b)) == (a == b)


def test_meta_keys_do_not_collide() -> None:
    lane = keys.topic_lane("t")
    meta = {
        keys.next_seq_key(lane),
        keys.next_seq_key(keys.retry_lane("t", "g")),
        keys.cursor_key(lane, "g"),
        keys.cursor_key(keys.retry_lane("t", "g"), "g"),
        keys.group_key("t", "g"),
        keys.WATERMARK_KEY,
        keys.PENDING_KEY,
    }
    assert len(meta) == 7


@pytest.mark.parametrize("value", [-1, 2**64])
def test_u64_rejects_out_of_range(value: int) -> None:
    with pytest.raises(struct.error):
        keys.u64(value)


@relaxed
@given(u64s)
def test_u64_round_trip_and_order(value: int) -> None:
    assert keys.read_u64(keys.u64(value)) == value
    assert len(keys.u64(value)) == 8


@pytest.mark.parametrize("prefix", keys.INTERNAL_PREFIXES)
@pytest.mark.parametrize("rest", ["", "g", "group-1"])
def test_one_list_says_what_is_internal_for_names_and_timer_keys(prefix: str, rest: str) -> None:
    """A name and a timer key aimed at it get the same answer, for every internal prefix."""
    name = prefix + rest
    assert keys.is_internal(name)
    assert keys.is_internal_timer(keys.timer_key(7, name, b"ident"))


@given(target=names, due=dues)
def test_a_timer_key_is_internal_exactly_when_its_target_is(target: str, due: int) -> None:
    key = keys.timer_key(due, target, b"x")
    assert keys.is_internal_timer(key) == keys.is_internal(keys.decode_timer_key(key).target)
