"""Tag filters in group settings: non-matching messages never reach the group (state
``filtered``), a changed filter applies to what the group has not received, and one
receive passes over a bounded number of messages."""

from __future__ import annotations

import orjson
import pytest
from pydantic import ValidationError

from storage import keys
from storage.records import MessageRecord
from storage.store import CF, RocksStore
from storage.txn import Txn
from tests.workers.conftest import EngineFactory
from tests.workers.support import run
from workers.clock import FakeClock
from workers.engine import Engine
from workers.ops import messages, views
from workers.rules.retry import GroupSettings

INVISIBLE_MS = 30_000


def deliver(engine: Engine, msg_id: str, tag: str | None) -> None:
    now = engine.clock.now_ms()
    run(engine.send(MessageRecord("t", msg_id, now, now, b"b", tag=tag)))


def set_filter(engine: Engine, group: str, expression: str) -> None:
    run(engine.put_group_settings("t", group, GroupSettings(filter=expression)))


def received(engine: Engine, group: str, limit: int = 100) -> list[str]:
    got = run(engine.receive("t", group, limit, 0, INVISIBLE_MS))
    return [g.record.msg_id for g in got]


def test_groups_with_different_filters_on_one_topic(engine: Engine) -> None:
    set_filter(engine, "ab", " TagA||  TagB ")
    set_filter(engine, "c", "TagC")
    for msg_id, tag in [("a", "TagA"), ("b", "TagB"), ("c", "TagC"), ("none", None)]:
        deliver(engine, msg_id, tag)
    assert received(engine, "ab") == ["a", "b"]
    assert received(engine, "c") == ["c"]
    assert received(engine, "all") == ["a", "b", "c", "none"]  # default "*"
    for msg_id in ("c", "none"):
        assert engine.group_view("t", "ab", msg_id).state == "filtered"
    assert engine.group_view("t", "ab", "a").state == "inflight"
    assert engine.group_view("t", "all", "none").state == "inflight"


def test_a_changed_filter_applies_to_what_was_not_received(engine: Engine) -> None:
    set_filter(engine, "g", "A")
    deliver(engine, "a1", "A")
    deliver(engine, "b1", "B")
    assert received(engine, "g") == ["a1"]
    set_filter(engine, "g", "B")
    deliver(engine, "a2", "A")
    deliver(engine, "b2", "B")
    assert received(engine, "g") == ["b2"]
    assert engine.group_view("t", "g", "b1").state == "filtered"  # stays filtered
    assert engine.group_view("t", "g", "a2").state == "filtered"
    set_filter(engine, "g", "*")
    deliver(engine, "c", None)
    assert received(engine, "g") == ["c"]


@pytest.mark.parametrize("expression", ["", "A ||", "|| A", "A | B", "A || || B", "A B", "*||A"])
def test_a_malformed_filter_is_refused(expression: str) -> None:
    with pytest.raises(ValidationError, match="filter"):
        GroupSettings(filter=expression)


ONE_IN = 100_000


def load(store: RocksStore, now: int, match_at: int, n: int = ONE_IN) -> None:
    """``n`` delivered messages, one of them tagged X, written straight to the store."""
    txn = Txn(store, now)
    for i in range(n):
        tag = "X" if i == match_at else "Y"
        messages.deliver(txn, MessageRecord("t", f"m{i:06d}", now, now, b"", tag=tag))
    txn.commit(0)


def test_one_match_in_a_hundred_thousand_in_one_batch(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    """The filtered receive reads the tag index, not the 99,999 others: one batch finds
    the match, and the cursor then passes everything committed."""
    engine = make_engine()
    load(engine.store, clock.now_ms(), match_at=ONE_IN - 7)
    engine.start()
    set_filter(engine, "g", "X")
    batches = engine.writer.batches
    assert received(engine, "g", limit=10) == [f"m{ONE_IN - 7:06d}"]
    assert engine.writer.batches - batches == 1
    assert received(engine, "g") == []
    cursor = engine.store.get(CF.META, keys.cursor_key(keys.topic_lane("t"), "g"))
    assert cursor is not None
    assert keys.read_u64(cursor) == ONE_IN  # past the last message
    assert engine.group_view("t", "g", "m000000").state == "filtered"
    deliver(engine, "late", "X")
    assert received(engine, "g") == ["late"]


def test_a_limit_leaves_the_cursor_on_the_next_match(engine: Engine) -> None:
    set_filter(engine, "g", "A || B")
    for i, tag in enumerate(["A", "C", "B", "C", "A", "B"]):
        deliver(engine, f"m{i}", tag)
    assert received(engine, "g", limit=2) == ["m0", "m2"]
    assert engine.group_view("t", "g", "m1").state == "filtered"
    assert engine.group_view("t", "g", "m3").state == "pending"  # not passed yet
    assert received(engine, "g", limit=2) == ["m4", "m5"]
    assert engine.group_view("t", "g", "m3").state == "filtered"


def test_retention_takes_the_tag_index_with_the_log(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = make_engine(retention_ms=1_000)
    engine.start()
    deliver(engine, "old", "X")
    clock.advance(5_000)
    engine.sweeper.retain()
    assert engine.store.scan(CF.LOGS, b"%TAG%", b"%TAG&", 10) == []


def test_settings_stored_under_older_rules_are_still_read(engine: Engine) -> None:
    """Issue 30.9: a filter with a NUL, or settings (a push) on an internal topic, are
    refused on the way in now; stored before, they must neither stop a receive nor the
    pushers' start (views.push_groups), which skips internal topics."""
    push = {"url": "http://127.0.0.1:9/hook"}
    stored = {
        keys.group_key("t", "g"): {"filter": "TagA\x00"},
        keys.group_key("%RETRY%g", "x"): {"push": push},
        keys.group_key("t", "pushed"): {"push": push},
    }

    def put(txn: Txn) -> None:
        for key, value in stored.items():
            txn.put(CF.META, key, orjson.dumps(value))

    engine.writer.call(put, durable=True)
    deliver(engine, "a", "TagA")
    assert received(engine, "g") == []  # the stored filter still applies, as stored
    assert engine.group_settings("t", "g").filter == "TagA\x00"
    assert set(views.push_groups(engine.store)) == {("t", "pushed")}


def backlog(engine: Engine, group: str) -> int:
    """The group's backlog as the groups listing, /metrics and the console show it."""
    return views.group_summary(engine.store, "t", group).backlog


def test_a_filtered_groups_backlog_counts_only_what_it_can_receive(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    """Issue 30.17: a filtered group's backlog (groups listing, /metrics, console) counted
    every message after its cursor, those it will never receive too, until a receive
    passed them over: an alert on it fired for a group that was keeping up."""
    engine = make_engine(retention_ms=60_000, sweep_interval_ms=10**9)
    engine.start()
    set_filter(engine, "a", "TagA")
    set_filter(engine, "ac", " TagA || TagC ")
    tags = ["TagB"] * 5 + ["TagA", None, "TagC", "TagA", None, "TagB"]
    for i, tag in enumerate(tags):
        deliver(engine, f"m{i}", tag)
    assert backlog(engine, "a") == 2
    assert backlog(engine, "ac") == 3
    assert backlog(engine, "all") == len(tags)  # no filter, no cursor yet: everything
    assert received(engine, "a", limit=1) == ["m5"]
    assert backlog(engine, "a") == 1
    assert received(engine, "a") == ["m8"]
    assert backlog(engine, "a") == 0
    set_filter(engine, "a", "TagB")  # applies to what it has not received
    deliver(engine, "m11", "TagB")
    assert backlog(engine, "a") == 1
    clock.advance(60_000)
    deliver(engine, "fresh", "TagC")  # within its retention
    engine.sweeper.retain()
    assert backlog(engine, "ac") == 1  # the swept ones are no longer anybody's backlog
    assert received(engine, "ac") == ["fresh"]


def test_a_backlog_over_a_tag_index_from_before_its_entries_were_numbered(
    engine: Engine,
) -> None:
    """Index entries written before they carried their number (empty values, no counter)
    are counted instead: the backlog is the same."""
    set_filter(engine, "a", "TagA")
    for i, tag in enumerate(["TagA", "TagB", "TagA", "TagA"]):
        deliver(engine, f"m{i}", tag)
    assert received(engine, "a", limit=1) == ["m0"]
    prefix = keys.tag_prefix("t", "TagA")

    def unnumber(txn: Txn) -> None:
        for key, _ in txn.scan(CF.LOGS, prefix, prefix + keys.TAG_KEY_END, 100):
            txn.put(CF.LOGS, key, b"")
        txn.delete(CF.META, keys.next_seq_key(prefix))
        txn.lane_next.pop(prefix, None)

    engine.writer.call(unnumber, durable=True)
    assert backlog(engine, "a") == 2
