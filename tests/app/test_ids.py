"""Server-made msg_ids: unique, in the send order, and time-prefixed."""

from __future__ import annotations

import re
import threading

from app.ids import new_msg_id
from app.schemas import MSG_ID_PATTERN


def test_ids_in_one_millisecond_count_up_in_order() -> None:
    ids = [new_msg_id(1_700_000_000_000) for _ in range(10_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert {i[:12] for i in ids} == {f"{1_700_000_000_000:012x}"}
    assert all(re.fullmatch(MSG_ID_PATTERN, i) and len(i) == 32 for i in ids)


def test_a_later_millisecond_sorts_after_and_a_clock_step_back_stays_ordered() -> None:
    first = new_msg_id(1_800_000_000_000)
    later = new_msg_id(1_800_000_000_001)
    back = new_msg_id(1_799_999_999_000)  # the clock stepped back: still after `later`
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
