"""The event log across SIGKILLs of the real server, mid-load and mid-export.

The exporter seals every 20 ms, so kills land while segments are written, renamed and
their ranges deleted. At the end the event log — the sealed segments plus what is still
in the store — is compared with what the clients were told and with the store itself:

- seqs are 0..n-1, each exactly once (nothing lost, nothing sealed twice);
- every send answered 201 has exactly one ``scheduled`` event, every cancel answered 200
  exactly one ``cancelled`` event; no message has two of a kind;
- "invented" is precise: a send whose reply was lost may have landed or not, so its
  event may exist — but an event exists if and only if its change is in the store. The
  messages with a ``scheduled`` event are exactly the messages the store knows, those
  with ``cancelled`` exactly the cancelled ones, those with ``delivered`` exactly the
  delivered ones; and no event names a msg_id no client ever sent.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from storage.event_table import decode
from storage.records import MessageState, decode_index
from storage.store import CF, RocksStore
from tests.e2e.conftest import now_ms
from tests.support.server import Server
from workers import segments

CYCLES = 3
TOPIC = "ev"
BATCH = 20
SEAL_WAIT_S = 30.0  # the longest a cycle waits for a segment sealed under its load
LOAD_S = (0.6, 1.5)  # each cycle's load runs this long (drawn) before the SIGKILL
END = b"\xff" * 9


class Ledger:
    """What the clients sent and what they were told."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: set[str] = set()
        self.created: set[str] = set()  # 201
        self.cancel_sent: set[str] = set()
        self.cancelled: set[str] = set()  # 200 to a DELETE
        self.last_due = 0


def load(srv: Server, ledger: Ledger, cycle: int, worker: int, stop: threading.Event) -> None:
    rng = random.Random(cycle * 100 + worker)
    with httpx.Client(base_url=srv.url, timeout=5) as c:
        for n in range(10**6):
            if stop.is_set():
                return
            # Due now (delivered in the same batch), soon (by the scanner, maybe after the
            # restart), or later (left to cancel).
            due = now_ms() + rng.choice((0, 300, 1_500, 2_500))
            single = n % 3 == 0  # single sends too: another path through the writer
            ids = [f"c{cycle}-w{worker}-{n}-{i}" for i in range(1 if single else BATCH)]
            with ledger.lock:
                ledger.sent.update(ids)
                ledger.last_due = max(ledger.last_due, due)
            items = [{"msg_id": m, "body": m, "deliver_at_ms": due} for m in ids]
            try:
                if single:
                    r = c.post(f"/v1/topics/{TOPIC}/messages", json=items[0])
                    created = [ids[0]] if r.status_code == 201 else []
                else:
                    r = c.post(f"/v1/topics/{TOPIC}/messages/batch", json={"messages": items})
                    results = r.json()["results"]
                    created = [x["msg_id"] for x in results if x["status"] == 201]
                with ledger.lock:
                    ledger.created.update(created)
                victim = ids[0]
                if due > now_ms() + 1_000:
                    with ledger.lock:
                        ledger.cancel_sent.add(victim)
                    r = c.delete(f"/v1/topics/{TOPIC}/messages/{victim}")
                    if r.status_code == 200:
                        with ledger.lock:
                            ledger.cancelled.add(victim)
            except httpx.TransportError:
                return  # killed under us: whatever was in flight is unanswered


def event_log(data_dir: Path) -> list[dict[str, Any]]:
    """The sealed segments, then what the store still holds (read with the server down)."""
    rows: list[dict[str, Any]] = []
    for seg in segments.segments(str(data_dir / "events")):
        rows.extend(pq.read_table(seg.path).to_pylist())
    store = RocksStore(data_dir)
    try:
        rows.extend(decode(store.scan(CF.EVENTS, b"", END, 10**9)).to_pylist())
    finally:
        store.close()
    return rows


def store_states(data_dir: Path) -> dict[str, MessageState]:
    store = RocksStore(data_dir)
    try:
        prefix = TOPIC.encode() + b"\x00"
        found = store.scan(CF.MESSAGES, prefix, TOPIC.encode() + b"\x01", 10**9)
    finally:
        store.close()
    return {k[len(prefix) :].decode(): decode_index(v).state for k, v in found}


@pytest.mark.slow
def test_sigkills_mid_load_and_mid_export_lose_and_invent_no_event(
    fresh_server: Callable[..., Server], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    ledger = Ledger()
    rng = random.Random(11)
    hidden_after_kill = 0
    for cycle in range(CYCLES):
        srv = fresh_server(data, ROCKTIMER_EVENTS_SEAL_MS="20")
        stop = threading.Event()
        workers = [
            threading.Thread(target=load, args=(srv, ledger, cycle, w, stop)) for w in range(3)
        ]
        for w in workers:
            w.start()
        sealed = len(segments.segments(str(data / "events")))
        time.sleep(rng.uniform(*LOAD_S))
        # At least one more segment sealed this cycle before the kill (a loaded machine
        # can take longer than the load's draw to start the exporter): the kill still
        # lands wherever the exporter is then, mid-export or not.
        deadline = time.monotonic() + SEAL_WAIT_S
        while len(segments.segments(str(data / "events"))) <= sealed:
            assert time.monotonic() < deadline, "the exporter sealed nothing under load"
            time.sleep(0.01)
        srv.kill()
        stop.set()
        for w in workers:
            w.join(timeout=30)
        hidden_after_kill += sum(1 for p in (data / "events").rglob(".*") if p.is_file())
    assert len(segments.segments(str(data / "events"))) >= CYCLES, "kills landed mid-export"

    srv = fresh_server(data, ROCKTIMER_EVENTS_SEAL_MS="20")
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        time.sleep(max(0.0, (ledger.last_due - now_ms()) / 1000))
        deadline = time.monotonic() + 30
        while c.get("/readyz").json()["pending_timers"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.get("/readyz").json()["pending_timers"] == 0
    assert srv.terminate() in (0, -15)  # uvicorn re-raises SIGTERM after a clean shutdown
    assert not [p for p in (data / "events").rglob(".*") if p.is_file()], "hidden files left"

    rows = event_log(data)
    assert sorted(r["seq"] for r in rows) == list(range(len(rows))), "a seq lost or repeated"
    per_kind: dict[str, Counter[str]] = {}
    for r in rows:
        per_kind.setdefault(r["kind"], Counter())[r["msg_id"]] += 1
    assert set(per_kind) <= {"scheduled", "delivered", "cancelled"}
    for kind, counts in per_kind.items():
        assert max(counts.values()) == 1, f"two {kind} events for one message"
    scheduled = set(per_kind["scheduled"])
    assert ledger.created <= scheduled, "a 201 without its scheduled event"
    assert ledger.cancelled <= set(per_kind.get("cancelled", ())), "a cancel without event"
    assert {r["msg_id"] for r in rows} <= ledger.sent, "an event for a message never sent"
    states = store_states(data)
    assert scheduled == set(states), "events and store disagree on which messages exist"
    for kind, state in (
        ("delivered", MessageState.DELIVERED),
        ("cancelled", MessageState.CANCELLED),
    ):
        assert set(per_kind.get(kind, ())) == {m for m, s in states.items() if s is state}, kind
    # The run did what it claims: unanswered sends, deliveries, cancels, crashed exports.
    assert len(ledger.sent) > len(ledger.created)
    assert per_kind["delivered"]
    assert ledger.cancelled
    print(f"events {len(rows)}, hidden files found after kills {hidden_after_kill}")
