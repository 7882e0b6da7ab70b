"""Tag filters in group settings: non-matching messages never reach the group (state
``filtered``), a changed filter applies to what the group has not received, and one
receive passes over a bounded number of messages."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from storage.records import MessageRecord
from storage.store import RocksStore
from tests.workers.conftest import EngineFactory
from tests.workers.support import run
from workers import consume, lanes, messages
from workers.clock import FakeClock
from workers.retry import GroupSettings
from workers.runner import Engine
from workers.txn import Txn

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


def test_one_match_in_a_hundred_thousand_within_bounded_batches(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = make_engine()
    load(engine.store, clock.now_ms(), match_at=ONE_IN - 7)
    engine.start()
    set_filter(engine, "g", "X")
    batches = engine.writer.batches
    assert received(engine, "g", limit=10) == [f"m{ONE_IN - 7:06d}"]
    rounds = engine.writer.batches - batches
    assert rounds >= ONE_IN // consume.FILTER_SCAN_BUDGET, "one batch per scan budget"
    assert received(engine, "g") == []  # the rest is passed over, the cursor at the end
    assert engine.group_view("t", "g", "m000000").state == "filtered"


def test_one_read_looks_at_no_more_than_its_budget(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = make_engine()
    load(engine.store, clock.now_ms(), match_at=9_999, n=10_000)
    txn = Txn(engine.store, clock.now_ms())
    lane = b"t\x00"
    kept, more = lanes.read_matching(txn, lane, "g", 10, lambda v: False, 5_000)
    assert (kept, more) == ([], True)
    txn.commit(0)
    cursor = engine.store.get("meta", b"cursor\x00t\x00g")
    assert cursor is not None
    assert int.from_bytes(cursor, "big") == 5_000
