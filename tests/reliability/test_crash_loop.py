"""The crash loop in CI: five SIGKILL cycles of the real server under mixed load, then the
exact checks (tools/crash_loop.py says what each one proves).

The seed is random per run and printed; CRASH_LOOP_SEED=n replays a failing one.
"""

from __future__ import annotations

import io
import os
import random
from pathlib import Path

import pytest

from tests.reliability.ledger import AUDIT, Ledger, Msg
from tools import crash_loop

CI_CYCLES = 5


@pytest.mark.slow
def test_nothing_acknowledged_is_lost_across_sigkills(tmp_path: Path) -> None:
    seed = int(os.environ.get("CRASH_LOOP_SEED") or random.SystemRandom().randrange(2**32))
    out = io.StringIO()
    config = crash_loop.Config(cycles=CI_CYCLES, seed=seed, data_dir=tmp_path / "data")
    summary = crash_loop.run(config, out)
    report = f"{out.getvalue()}{summary.report()}"
    print(report)
    assert summary.ok, report
    assert len(summary.kills_at_s) == CI_CYCLES
    assert max(summary.ready_s) <= crash_loop.READY_LIMIT_S
    # The run exercised what it claims to: sends, resends, cancels, deliveries, both groups.
    stats = summary.stats
    for counter in (
        "acknowledged",
        "duplicates_200",
        "cancelled",
        "resurrections_refused",
        "delivered",
        "audit_acked",
        "work_acked",
        "work_nacked",
    ):
        assert stats[counter] > 0, f"{counter} is 0: the load did not do what it should\n{report}"
    assert stats["delivered"] + stats["final_cancelled"] == stats["messages"], report


# --- the ledger's rules, on made-up replies (no server): each check can fail -------------


def _ledger_with(msg_id: str = "m1") -> tuple[Ledger, Msg]:
    ledger = Ledger()
    m = ledger.new("t", msg_id, {"msg_id": msg_id, "body": f"t/{msg_id}", "deliver_at_ms": 5})
    ledger.on_send(m, 201, {"state": "scheduled", "deliver_at_ms": 5, "created_at_ms": 1}, "")
    return ledger, m


def _item(msg_id: str, attempt: int, receipt: str) -> dict[str, object]:
    return {
        "msg_id": msg_id,
        "body": f"t/{msg_id}",
        "deliver_at_ms": 5,
        "delivered_at_ms": 6,
        "attempt": attempt,
        "receipt": receipt,
    }


def _kinds(ledger: Ledger) -> list[str]:
    return [v.kind for v in ledger.violations]


def test_ledger_sends_idempotent_or_violating() -> None:
    ledger, m = _ledger_with()
    ledger.on_send(m, 200, {"state": "delivered", "deliver_at_ms": 5, "created_at_ms": 1}, "")
    assert _kinds(ledger) == []
    ledger.on_send(m, 201, {"state": "scheduled", "deliver_at_ms": 9, "created_at_ms": 1}, "")
    assert _kinds(ledger) == ["created-twice", "idempotency"]
    ledger.on_send(m, 409, None, "cancelled")  # but we never cancelled it
    assert _kinds(ledger)[-1] == "conflict-uncancelled"


def test_ledger_cancelled_message_is_never_received_in_either_order() -> None:
    ledger, m = _ledger_with()
    ledger.on_cancel(m, 200, {"state": "cancelled"}, "")
    ledger.on_received(AUDIT, "t", [_item("m1", 1, "r1")], 0, 1_000)
    assert _kinds(ledger) == ["cancelled-but-delivered"]
    ledger, m = _ledger_with()
    ledger.on_received(crash_loop.WORK, "t", [_item("m1", 1, "r1")], 0, 1_000)
    ledger.on_cancel(m, 200, {"state": "cancelled"}, "")
    assert _kinds(ledger) == ["cancelled-but-delivered"]


def test_ledger_redelivery_is_legal_until_an_ack_is_confirmed() -> None:
    ledger, _ = _ledger_with()
    first = ledger.on_received(AUDIT, "t", [_item("m1", 1, "r1")], 0, 1_000)
    ledger.on_received(AUDIT, "t", [_item("m1", 1, "r2")], 0, 1_000)
    assert _kinds(ledger) == []
    assert ledger.stats["audit_repeat_first"] == 1
    ledger.on_settled(AUDIT, "ack", first, [{"receipt": "r1", "status": "acked"}], 10)
    ledger.on_received(AUDIT, "t", [_item("m1", 2, "r3")], 0, 1_000)
    assert _kinds(ledger) == ["received-after-ack"]


def test_ledger_expired_only_after_the_invisibility() -> None:
    ledger, _ = _ledger_with()
    held = ledger.on_received(crash_loop.WORK, "t", [_item("m1", 1, "r1")], 1_000, 1_000)
    expired = [{"receipt": "r1", "status": "expired"}]
    ledger.on_settled(crash_loop.WORK, "ack", held, expired, 2_000)
    assert _kinds(ledger) == []
    ledger.on_settled(crash_loop.WORK, "ack", held, expired, 1_999)
    ledger.on_settled(crash_loop.WORK, "nack", held, [{"receipt": "r1", "status": "unknown"}], 0)
    assert _kinds(ledger) == ["expired-early", "nack-unknown"]


def test_ledger_an_unknown_receipt_is_legal_only_across_a_failover() -> None:
    """Cluster mode answers a receive before its changelog record (docs/cluster.md): a
    failover can undo it, and its receipt's ack then answers unknown. Outside a failover
    (a receive before it ended, settled after it began) unknown stays a violation."""
    unknown = [{"receipt": "r1", "status": "unknown"}]
    ledger, _ = _ledger_with()
    held = ledger.on_received(crash_loop.WORK, "t", [_item("m1", 1, "r1")], 1_000, 5_000)
    ledger.failover_began(1_500)
    ledger.on_settled(crash_loop.WORK, "ack", held, unknown, 1_600)  # during it
    ledger.failover_ended(2_000)
    ledger.on_settled(crash_loop.WORK, "nack", held, unknown, 2_500)  # after it
    assert _kinds(ledger) == []
    assert ledger.stats["work_ack_undone_by_failover"] == 1
    assert ledger.stats["work_nack_undone_by_failover"] == 1
    later = ledger.on_received(crash_loop.WORK, "t", [_item("m1", 2, "r1")], 3_000, 5_000)
    ledger.on_settled(crash_loop.WORK, "ack", later, unknown, 3_100)  # a receive after it
    early = ledger.on_received(crash_loop.WORK, "t", [_item("m1", 1, "r1")], 500, 5_000)
    ledger.on_settled(crash_loop.WORK, "nack", early, unknown, 1_400)  # settled before it
    assert _kinds(ledger) == ["ack-unknown", "nack-unknown"]


def test_ledger_nothing_unsent_appears() -> None:
    ledger, _ = _ledger_with()
    ledger.on_received(AUDIT, "t", [_item("ghost", 1, "r1")], 0, 1_000)
    assert _kinds(ledger) == ["never-sent"]


def test_store_open_tolerates_only_a_torn_tail_of_the_newest_wal() -> None:
    log = (
        '... EVENT_LOG_v1 {"time_micros": 1, "job": 1, "event": "recovery_started", '
        '"wal_files": [234, 238, 241]}\n'
        "... [WARN] [db/db_impl/db_impl_open.cc:1119] /d/000{n}.log: dropping 243 bytes; "
        "Corruption: error reading trailing data due to encountering EOF\n"
    )
    assert crash_loop.store_open_problems(log.replace("{n}", "241")) == (1, [])
    body = log.replace(
        "error reading trailing data due to encountering EOF", "truncated record body"
    )
    assert crash_loop.store_open_problems(body.replace("{n}", "241")) == (1, [])
    assert crash_loop.store_open_problems(body.replace("{n}", "238"))[0] == 0
    torn, problems = crash_loop.store_open_problems(log.replace("{n}", "238"))
    assert torn == 0
    assert len(problems) == 1
    assert crash_loop.store_open_problems("... RepairDB: started\n")[1] != []
