"""Server-made msg_ids: unique, in the send order, and time-prefixed."""

from __future__ import annotations

import re
import threading

from app.ids import _hex_ids, _Ids, new_msg_id, new_msg_ids
from app.schemas import MSG_ID_PATTERN


def test_ids_in_one_millisecond_count_up_in_order() -> None:
    made = _Ids()  # its own: the process's generator may have made a later ms already
    ids = [made.make(1_700_000_000_000, 1)[0] for _ in range(10_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert {i[:12] for i in ids} == {f"{1_700_000_000_000:012x}"}
    assert all(re.fullmatch(MSG_ID_PATTERN, i) and len(i) == 32 for i in ids)


def test_a_later_millisecond_sorts_after_and_a_clock_step_back_stays_ordered() -> None:
    made = _Ids()
    first, later = made.make(1_800_000_000_000, 1)[0], made.make(1_800_000_000_001, 1)[0]
    back = made.make(1_799_999_999_000, 1)[0]  # the clock stepped back: still after `later`
    assert first < later < back
    assert back[:12] == later[:12]


def test_ids_made_on_many_threads_are_unique() -> None:
    made: list[list[str]] = [[] for _ in range(4)]

    def make(out: list[str]) -> None:
        out.extend(new_msg_id(1_900_000_000_000 + i // 500) for i in range(5_000))

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [i for out in made for i in out]
    assert len(set(everything)) == len(everything) == 20_000


def test_a_block_of_ids_continues_the_sequence_one_by_one_would_make() -> None:
    now = 2_000_000_000_000  # after any millisecond the process's generator has seen
    first = new_msg_id(now)
    block = new_msg_ids(now, 9_000)  # crosses the 4096-id steps of the hex table
    after = new_msg_id(now)
    everything = [first, *block, after]
    assert everything == sorted(everything)
    counters = [int(i[12:], 16) for i in everything]
    assert counters == list(range(counters[0], counters[0] + len(everything)))


def test_hex_ids_match_plain_formatting_across_carries() -> None:
    for first in (0, 4095, 4096 * 7 - 3, 2**79 - 5000):
        assert _hex_ids("p", first, 5_000) == [f"p{i:020x}" for i in range(first, first + 5_000)]
