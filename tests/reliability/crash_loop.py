"""Crash loop: SIGKILL the real server under load, again and again, and prove that nothing
acknowledged is ever lost. ``make crash`` runs 50 cycles (``CYCLES=n``);
tests/reliability/test_crash_loop.py runs 5 in CI.

One data dir lives through the whole run. Each cycle:

1. **Load.** Producers (single and batch sends, deliver times from 2 s ago to 4 s ahead,
   some msg_ids sent twice on purpose, in one batch and across requests, and cancelled ids
   sent again), a canceller (DELETE of scheduled ids, half of them about to fall due, to
   race the scanner), two ``work`` consumers (ack, nack, or let the invisibility run out;
   group retry policy fixed 200 ms, max_attempts 64) and one ``audit`` consumer that only
   receives and acks. Most cycles also have a storm: 600 messages due in the same ms, 60
   of them cancelled by 6 connections at once from just before that ms on, so that some
   cancels commit after the scanner took their keys and before the deliverer moved them
   (architecture.md, invariant 4). Each start draws the scan chunk (16, 64 or 2000 keys)
   and the put-queue depth, so that moves go by point deletes or by one range delete.
2. **Kill.** SIGKILL at an instant drawn from the seeded RNG. Every request then in flight
   has an unknown outcome: the ledger writes it down as *unanswered*, never as failed.
3. **Restart** on the same data dir: /readyz must answer 200 within 10 s; RocksDB's info
   LOG of the open must mention no repair and no corruption other than a torn tail of the
   newest WAL (see store_open_problems); the server's own log no traceback or error.
4. **Recover** as a real client would: every send left unanswered is sent again byte for
   byte, same msg_id (a GET first tells whether the lost one had landed; the retry must
   then answer 200 if it had, 201 if not: exactly one message either way); every cancel
   left unanswered is sent again.
5. **Check** the server against the ledger (below).

After the last cycle a final phase stops the server cleanly (SIGTERM), starts it again,
waits until every scheduled message is due, drains both groups acking everything, and runs
the exact checks.

What is checked
---------------
Every send reply (load and recovery):
- a (topic, msg_id) gets at most one 201, ever; a 200 carries the first record (same
  deliver_at_ms, same created_at_ms);
- 409 only for an id we cancelled, and resending an id whose cancel got 200 must be 409
  (a tombstone is never resurrected).

Status (``GET /v1/topics/{t}/messages/{id}``) of every acknowledged message not settled yet,
at each check, and of every message at the end:
- 404 is a lost message; ``cancelled`` only if we cancelled it, and a message whose cancel
  got 200 says ``cancelled`` at every check, nothing else;
- ``scheduled`` is fine until deliver_at; still scheduled DUE_GRACE_MS after it is a stuck
  timer (after the final wait nothing may be scheduled); ``delivered`` never goes back to
  ``scheduled``; deliver_at_ms / created_at_ms are the send's; delivered_at >= deliver_at.

Topic logs, through the consumers:
- whatever is received was sent by us, with the body we sent, the deliver_at_ms we were
  told, delivered_at_ms >= deliver_at_ms, and never a message whose cancel got 200 (both
  orders are checked: a receive recorded before the cancel's 200 came back counts too);
- acked is final: once a group's ack of a receipt answered ``acked``, that group never
  receives the message again (a higher attempt, or the same attempt under another
  receipt, would be a second copy) and never gets a second receipt of it acked;
- ``unknown`` for a receipt we were just handed is a bug; ``expired`` is legal only if the
  ack's reply came at or after (receive sent + invisible_ms): the server's deadline cannot
  be earlier than that;
- each check drains the audit group until every message whose status says delivered has
  been received there: delivered means in the topic log, and a topic log reaches every
  group.

Why the audit group counts first deliveries rather than receives: after a crash,
redelivery is legal (at-least-once). A receive whose reply was lost leaves the message in
flight, so it comes back with attempt 2 although we never saw attempt 1; an ack whose reply
was lost may or may not have landed. So a repeated receive in the audit group is a
violation only once an ack of that message had been confirmed (the rule above); a second
*attempt 1* under a new receipt with no confirmed ack (a lost cursor write would look like
that; a SIGKILL should never cause it, as unsynced WAL writes are already in the OS) is
counted as ``repeat_first`` and left to the exact checks at the end:

- a fresh group, created after the final drain, reads every topic log from the start with
  no crash in between: each delivered msg_id appears exactly once (attempt 1), a cancelled
  one never, and nothing else appears; messages that went through a timer (their 201 said
  scheduled) appear in deliver_at order (api.md; ones sent already due enter on arrival);
- ``GET .../groups/{g}/messages/{id}`` of every delivered message whose ack we never saw
  confirmed (the reply was lost) says ``acked`` (``dead`` is tolerated, and counted, for
  the work group);
- /readyz reports pending_timers == 0 once everything was due.

Reproducing a failure: ``--seed`` fixes every random choice (each worker's plan, the
deliver times, the kill instants); thread interleavings and where exactly a SIGKILL lands
inside a request are the OS's, so a seed replays the plan, not the microsecond. Run the
printed seed again, or more cycles, to shake a rare race out.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import enum
import random
import re
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import httpx

from bench.process import free_port
from tests.e2e.server import Server

TOPICS = ("crash-a", "crash-b")
AUDIT = "audit"  # receives and acks, nothing else: its reads are the topic log
WORK = "work"  # acks, nacks or lets the invisibility run out
FINAL_READER = "final-reader"  # created at the very end: reads every log from the start
GROUP_SETTINGS: dict[str, Any] = {
    "retry": {"policy": "fixed", "interval_ms": 200},  # nacked messages come back fast
    "max_attempts": 64,
}

DEFAULT_CYCLES = 50
LOAD_S = 3.0  # the longest load of one cycle; the kill lands at a random instant in it
MIN_KILL_S = 0.3  # every worker is under way before a kill can land
PAST_MS = 2_000  # deliver times from this far in the past (due at once) ...
AHEAD_MS = 4_000  # ... to this far ahead: everything falls due within the run
NEAR_DUE_MS = 400  # a cancel of a message this close to due races the scanner

PRODUCERS = 3
WORK_CONSUMERS = 2
PRODUCER_OPS = 150  # per producer and cycle: bounds the load in count as well as in time
CANCELLER_OPS = 80
CONSUMER_OPS = 1_000  # receives per consumer and phase (each long-polls at most WAIT_MS)
BATCH_MAX = 12
SAME_BATCH_DUP = 0.15  # a batch carries one of its own msg_ids twice
OLD_ID_IN_BATCH = 0.15  # a batch carries an msg_id acknowledged earlier
PAUSE_S = (0.002, 0.02)  # between two ops of one worker
CANCEL_PAUSE_S = (0.005, 0.03)

RECEIVE_MAX = 64
WAIT_MS = 200  # long polls short enough that a worker sees its stop flag soon
AUDIT_INVISIBLE_MS = 1_000  # the API's minimum: a receive lost in a crash comes back fast
WORK_INVISIBLE_MS = (1_000, 2_000)
WORK_ACK = 0.60  # work consumers ack this share, nack the next ...
WORK_NACK = 0.25  # ... and ignore the rest (the invisibility runs out)

READY_LIMIT_S = 10.0  # restart to /readyz 200, or it is a violation
DUE_GRACE_MS = 2_000  # a due message still "scheduled" this long after deliver_at is stuck
AUDIT_DRAIN_S = 6.0  # > AUDIT_INVISIBLE_MS + a restart: what a lost receive held is back
FINAL_DRAIN_S = 60.0
QUIET_S = 3.0  # > the longest invisibility + retry interval: nothing more can come back
FINAL_DUE_MARGIN_MS = 300
HTTP_TIMEOUT_S = 10.0
THROTTLE_RETRIES = 5  # 429s in a row before a send is left unanswered (sent again later)
THROTTLE_PAUSE_S = 0.2
STATUS_THREADS = 4  # parallel GETs in a check
SPOT_CHECKS = 200  # settled messages checked again at every cycle
JOIN_S = HTTP_TIMEOUT_S + 5
FINAL_READ_PAGE = 1_000
FINAL_READ_INVISIBLE_MS = 600_000  # the reader never acks; nothing may come back meanwhile
LOG_MARKERS_SERVER = ("Traceback", " ERROR ", " CRITICAL ")
SHOW_VIOLATIONS = 40

SERVER_ENV = {
    "ROCKTIMER_API_KEYS": "{}",  # open service, whatever the caller's environment says
    "ROCKTIMER_SWEEP_INTERVAL_MS": "500",  # compact the delivered timer range under crashes
}
# Drawn again at every start: small chunks make many small scans and moves (point deletes),
# the default lets a storm go as one move (one range delete): both paths meet the kill.
SCAN_CHUNKS = (16, 64, 2_000)
PUT_QUEUE_CHUNKS = (1, 4)
STORM_CHANCE = 0.8  # a cycle has one storm: STORM_SIZE messages due in the same ms
STORM_SIZE = 600  # > workers.messages.RANGE_DELETE_MIN: one move may take a range delete
STORM_AHEAD_MS = (200, 1_500)
STORM_CANCELS = 60  # storm messages cancelled from just before their due time on ...
STORM_CANCELLERS = 6  # ... by this many connections at once
STORM_CANCEL_LEAD_MS = 2

Key = tuple[str, str]  # (topic, msg_id): a message's identity


_RECOVERY_WALS = re.compile(r'"event": "recovery_started", "wal_files": \[([0-9, ]*)\]')
_TORN_TAIL = re.compile(r"/(\d+)\.log: dropping \d+ bytes; Corruption: error reading trailing data")


def store_open_problems(log: str) -> tuple[int, list[str]]:
    """What RocksDB's info LOG of one open says: (torn WAL tails dropped, problems).

    A SIGKILL inside the write() of a batch's WAL record (the kernel may stop a write to a
    file between pages on a fatal signal) leaves that record cut short at the end of the
    newest WAL, and point-in-time recovery drops it. That write never returned, so nothing
    in it was acknowledged: normal recovery, not a repair (and the ledger proves no
    acknowledged loss). A repair, or a corruption anywhere else, is a problem.
    """
    wals = [
        int(n)
        for found in _RECOVERY_WALS.finditer(log)
        for n in found.group(1).replace(" ", "").split(",")
        if n
    ]
    newest = max(wals, default=None)
    torn, problems = 0, []
    for line in log.splitlines():
        low = line.lower()
        if "repair" in low:
            problems.append(line.strip())
        elif "corrupt" in low:
            tail = _TORN_TAIL.search(line)
            if tail is not None and int(tail.group(1)) == newest:
                torn += 1
            else:
                problems.append(line.strip())
    return torn, problems


def now_ms() -> int:
    """Wall-clock ms, the server's clock too (same machine): deadlines compare directly."""
    return time.time_ns() // 1_000_000


def messages_path(topic: str, msg_id: str | None = None) -> str:
    base = f"/v1/topics/{topic}/messages"
    return base if msg_id is None else f"{base}/{msg_id}"


def group_path(topic: str, group: str) -> str:
    return f"/v1/topics/{topic}/groups/{group}"


# --- the ledger -------------------------------------------------------------------------


class Cancel(enum.Enum):
    NONE = "none"
    REQUESTED = "requested"  # DELETE sent, no reply yet
    LOST = "lost"  # the reply was lost in a crash: sent again after the restart
    OK = "ok"  # 200: never to be delivered
    CONFLICT = "conflict"  # 409: it was delivered first


@dataclass(eq=False)
class Msg:
    topic: str
    msg_id: str
    request: dict[str, Any]  # the send body, sent again as is after a lost reply
    unanswered: bool = True  # no definitive reply to a send of it yet
    accepted: bool = False  # a send of it was answered 201 or 200
    creates: int = 0  # 201 replies
    deliver_at_ms: int | None = None
    created_at_ms: int | None = None
    delivered: bool = False  # known delivered (status, a receive, a 409 on cancel)
    timer_path: bool = False  # its 201 said scheduled: it enters its log in deliver_at order
    cancel: Cancel = Cancel.NONE
    settled: bool = False  # its final state was checked; the receive stream still watches it

    @property
    def key(self) -> Key:
        return (self.topic, self.msg_id)

    @property
    def body(self) -> str:
        return str(self.request["body"])


class Violation(NamedTuple):
    kind: str
    topic: str
    msg_id: str
    detail: str


class Held(NamedTuple):
    """A received message, as its receipt is about to be acked or nacked."""

    key: Key
    receipt: str
    attempt: int
    sent_ms: int  # when the receive was sent: the server's deadline is at least this + ...
    invisible_ms: int


class Ledger:
    """The client-side log: every message tried, every reply, every receive and ack.

    Workers record here from many threads; every method takes the one lock.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.msgs: dict[Key, Msg] = {}
        self.stats: Counter[str] = Counter()
        self.violations: list[Violation] = []
        self.errors: list[str] = []
        self.seen: dict[tuple[str, Key], dict[str, int]] = {}  # receipt -> attempt
        self.acked: dict[tuple[str, Key], tuple[str, int]] = {}  # confirmed (receipt, attempt)
        self._accepted: list[Msg] = []
        self._cancellable: list[Msg] = []
        self._cancelled: list[Msg] = []
        self._reported: set[tuple[str, str, str]] = set()

    # --- bookkeeping ---------------------------------------------------------------------

    def violate(self, kind: str, topic: str, msg_id: str, detail: str) -> None:
        """Record a broken invariant, once per (kind, message): later checks see it again."""
        with self.lock:
            if msg_id != "-":
                if (kind, topic, msg_id) in self._reported:
                    return
                self._reported.add((kind, topic, msg_id))
            self.violations.append(Violation(kind, topic, msg_id, detail))

    def _bad(self, kind: str, m: Msg, detail: str) -> None:
        self.violate(kind, m.topic, m.msg_id, detail)

    def error(self, text: str) -> None:
        """A failure of the harness or of the run itself (not a broken invariant)."""
        with self.lock:
            self.errors.append(text)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.stats[name] += n

    def new(self, topic: str, msg_id: str, request: dict[str, Any]) -> Msg:
        with self.lock:
            m = Msg(topic, msg_id, request)
            assert m.key not in self.msgs, f"msg_id {msg_id} planned twice"
            self.msgs[m.key] = m
            self.stats["messages"] += 1
            return m

    def prune(self, now: int) -> None:
        """Forget cancel candidates already due (they only slow the picking down)."""
        with self.lock:
            self._cancellable = [
                m
                for m in self._cancellable
                if m.cancel is Cancel.NONE and (m.deliver_at_ms or 0) > now
            ]

    # --- producers -----------------------------------------------------------------------

    def on_send(self, m: Msg, status: int, reply: Any, text: str) -> None:
        """A definitive reply to a send of ``m`` (single, or one item of a batch)."""
        with self.lock:
            self.stats["send_replies"] += 1
            if status in (200, 201):
                self._accepted_reply(m, status, reply)
            elif status == 409:
                if m.cancel is Cancel.NONE:
                    self._bad(
                        "conflict-uncancelled", m, f"send answered 409 but never cancelled: {text}"
                    )
                self.stats["resurrections_refused"] += 1
                m.unanswered = False
            else:
                self._bad("send-status", m, f"send answered {status}: {text}")

    def _accepted_reply(self, m: Msg, status: int, reply: Any) -> None:
        deliver_at: int = reply["deliver_at_ms"]
        created_at: int | None = reply.get("created_at_ms")
        if m.accepted:
            if status == 201:
                self._bad("created-twice", m, "a second 201 for the same (topic, msg_id)")
            else:
                self.stats["duplicates_200"] += 1
            if deliver_at != m.deliver_at_ms:
                self._bad(
                    "idempotency",
                    m,
                    f"resend answered deliver_at {deliver_at}, first reply {m.deliver_at_ms}",
                )
            if None not in (created_at, m.created_at_ms) and created_at != m.created_at_ms:
                self._bad(
                    "idempotency",
                    m,
                    f"resend answered created_at {created_at}, first reply {m.created_at_ms}",
                )
        else:
            m.accepted = True
            m.deliver_at_ms = deliver_at
            self._accepted.append(m)
            self.stats["acknowledged"] += 1
            if reply["state"] == "scheduled":
                self._cancellable.append(m)
        if m.created_at_ms is None:
            m.created_at_ms = created_at
        if status == 201:
            m.creates += 1
            m.timer_path = reply["state"] == "scheduled"
        if reply["state"] == "delivered":
            m.delivered = True
        elif reply["state"] != "scheduled":
            self._bad("send-state", m, f"send answered state {reply['state']!r}")
        m.unanswered = False

    def on_send_lost(self, m: Msg) -> None:
        with self.lock:
            if m.accepted:
                self.stats["resend_replies_lost"] += 1
            else:
                m.unanswered = True

    def pick_accepted(self, rng: random.Random) -> Msg | None:
        """An acknowledged message not being cancelled: to be sent again (must answer 200)."""
        with self.lock:
            for _ in range(10):
                if not self._accepted:
                    return None
                m = rng.choice(self._accepted)
                if m.cancel is Cancel.NONE:
                    return m
            return None

    def pick_cancelled(self, rng: random.Random) -> Msg | None:
        """A message whose cancel got 200: to be sent again (must answer 409)."""
        with self.lock:
            return rng.choice(self._cancelled) if self._cancelled else None

    def pick_cancel(self, rng: random.Random, near: bool) -> Msg | None:
        """A scheduled message to cancel (``near``: one about to fall due); marks it."""
        with self.lock:
            now = now_ms()
            for _ in range(30):
                if not self._cancellable:
                    return None
                m = rng.choice(self._cancellable)
                due = m.deliver_at_ms or 0
                if m.cancel is not Cancel.NONE or due <= now:
                    continue
                if near and due > now + NEAR_DUE_MS:
                    continue
                m.cancel = Cancel.REQUESTED
                self.stats["cancels_sent"] += 1
                return m
            return None

    def claim_cancel(self, m: Msg) -> bool:
        """Mark an acknowledged, still scheduled ``m`` as being cancelled (False: it is not)."""
        with self.lock:
            if not m.accepted or m.delivered or m.cancel is not Cancel.NONE:
                return False
            m.cancel = Cancel.REQUESTED
            self.stats["cancels_sent"] += 1
            return True

    def on_cancel(self, m: Msg, status: int, reply: Any, text: str) -> None:
        with self.lock:
            if status == 200:
                m.cancel = Cancel.OK
                self._cancelled.append(m)
                self.stats["cancelled"] += 1
                if reply.get("state") != "cancelled":
                    self._bad("cancel-reply", m, f"cancel 200 with body {text}")
                groups = [g for (g, key) in self.seen if key == m.key]
                if m.delivered or groups:
                    self._bad(
                        "cancelled-but-delivered",
                        m,
                        f"cancel answered 200 but the message was delivered (seen by {groups})",
                    )
            elif status == 409:
                m.cancel = Cancel.CONFLICT
                m.delivered = True
                self.stats["cancel_conflicts"] += 1
            elif status == 404:
                self._bad("lost", m, "cancel of an acknowledged message answered 404")
            else:
                self._bad("cancel-status", m, f"cancel answered {status}: {text}")

    def on_cancel_lost(self, m: Msg) -> None:
        with self.lock:
            m.cancel = Cancel.LOST
            self.stats["cancel_replies_lost"] += 1

    # --- consumers -----------------------------------------------------------------------

    def on_received(
        self, group: str, topic: str, items: Sequence[Any], sent_ms: int, invisible_ms: int
    ) -> list[Held]:
        held: list[Held] = []
        with self.lock:
            for item in items:
                msg_id: str = item["msg_id"]
                attempt: int = item["attempt"]
                receipt: str = item["receipt"]
                key = (topic, msg_id)
                self.stats[f"{group}_receives"] += 1
                if attempt > 1:
                    self.stats[f"{group}_redeliveries"] += 1
                self._check_received(group, key, item)
                gk = (group, key)
                acked = self.acked.get(gk)
                if acked is not None and (
                    attempt > acked[1] or (attempt == acked[1] and receipt != acked[0])
                ):
                    self.violate(
                        "received-after-ack",
                        topic,
                        msg_id,
                        f"group {group} received attempt {attempt} after its ack of attempt "
                        f"{acked[1]} was confirmed",
                    )
                seen = self.seen.setdefault(gk, {})
                if receipt not in seen and attempt in seen.values():
                    repeat = "repeat_first" if attempt == 1 else "repeat_attempt"
                    self.stats[f"{group}_{repeat}"] += 1
                seen[receipt] = attempt
                held.append(Held(key, receipt, attempt, sent_ms, invisible_ms))
        return held

    def _check_received(self, group: str, key: Key, item: Any) -> None:
        m = self.msgs.get(key)
        if m is None:
            self.violate("never-sent", *key, f"group {group} received a message never sent")
            return
        if item["body"] != m.body:
            self._bad("body", m, f"group {group} received body {item['body']!r}")
        if m.deliver_at_ms is not None and item["deliver_at_ms"] != m.deliver_at_ms:
            self._bad("deliver-at", m, f"received deliver_at {item['deliver_at_ms']}")
        if item["delivered_at_ms"] < item["deliver_at_ms"]:
            self._bad("early", m, f"delivered at {item['delivered_at_ms']}, due later")
        if m.cancel is Cancel.OK:
            self._bad("cancelled-but-delivered", m, f"cancel got 200, group {group} received it")
        m.delivered = True

    def on_settled(
        self,
        group: str,
        op: str,
        held: Sequence[Held],
        results: Sequence[Any],
        reply_ms: int,
    ) -> None:
        """The per-receipt results of an ack or a nack."""
        with self.lock:
            if len(results) != len(held):
                self.violate(f"{op}-results", *held[0].key, f"{len(results)} for {len(held)}")
                return
            for h, res in zip(held, results, strict=True):
                status = res["status"]
                if res["receipt"] != h.receipt:
                    self.violate(f"{op}-results", *h.key, "results out of order")
                elif status in ("acked", "nacked"):
                    self.stats[f"{group}_{status}"] += 1
                    if status == "acked":
                        self._confirm_ack(group, h)
                elif status == "expired":
                    self.stats[f"{group}_{op}_expired"] += 1
                    if reply_ms < h.sent_ms + h.invisible_ms:
                        self.violate(
                            "expired-early",
                            *h.key,
                            f"{group} {op} answered expired {h.sent_ms + h.invisible_ms - reply_ms}"
                            " ms before the invisibility could have run out",
                        )
                else:
                    self.violate(f"{op}-{status}", *h.key, f"{group}: a fresh receipt is {status}")

    def _confirm_ack(self, group: str, h: Held) -> None:
        gk = (group, h.key)
        prev = self.acked.get(gk)
        if prev is None:
            self.acked[gk] = (h.receipt, h.attempt)
        elif prev[0] != h.receipt:
            self.violate(
                "acked-twice",
                *h.key,
                f"group {group} acked attempts {prev[1]} and {h.attempt} under two receipts",
            )

    # --- checks --------------------------------------------------------------------------

    def unanswered(self) -> list[Msg]:
        with self.lock:
            return [m for m in self.msgs.values() if m.unanswered]

    def lost_cancels(self) -> list[Msg]:
        with self.lock:
            return [m for m in self.msgs.values() if m.cancel is Cancel.LOST]

    def to_check(self, everything: bool) -> list[Msg]:
        with self.lock:
            return [m for m in self._accepted if everything or not m.settled]

    def settled_sample(self, rng: random.Random, n: int) -> list[Msg]:
        with self.lock:
            settled = [m for m in self._accepted if m.settled]
            return rng.sample(settled, min(n, len(settled)))

    def all_messages(self) -> list[Msg]:
        with self.lock:
            return list(self.msgs.values())

    def audit_missing(self, msgs: Iterable[Msg]) -> list[Msg]:
        with self.lock:
            return [m for m in msgs if (AUDIT, m.key) not in self.seen]

    def is_acked(self, group: str, m: Msg) -> bool:
        with self.lock:
            return (group, m.key) in self.acked

    def receives(self) -> int:
        with self.lock:
            return sum(v for k, v in self.stats.items() if k.endswith("_receives"))

    def check_status(self, m: Msg, status: int, view: Any, text: str) -> str | None:
        """Check one GET of a message's status against what we know; returns its state."""
        with self.lock:
            if status == 404:
                self._bad("lost", m, "acknowledged send unknown to the server (GET 404)")
                return None
            if status != 200:
                self._bad("status-code", m, f"GET answered {status}: {text}")
                return None
            state: str = view["state"]
            if view["deliver_at_ms"] != m.deliver_at_ms:
                self._bad("deliver-at", m, f"GET deliver_at {view['deliver_at_ms']}")
            if m.created_at_ms is not None and view["created_at_ms"] != m.created_at_ms:
                self._bad("created-at", m, f"GET created_at {view['created_at_ms']}")
            if state == "cancelled":
                if m.cancel is not Cancel.OK:
                    self._bad(
                        "cancelled-unasked", m, f"state cancelled, our cancel: {m.cancel.value}"
                    )
                return state
            if m.cancel is Cancel.OK:
                self._bad("cancel-undone", m, f"cancel answered 200, state now {state}")
            if state == "scheduled":
                if m.delivered:
                    self._bad("state-backwards", m, "delivered before, scheduled now")
            elif state == "delivered":
                m.delivered = True
                if view.get("delivered_at_ms", 0) < (m.deliver_at_ms or 0):
                    self._bad("early", m, f"delivered at {view.get('delivered_at_ms')}")
            else:
                self._bad("state", m, f"unknown state {state!r}")
            return state

    def settle(self, msgs: Iterable[Msg]) -> None:
        with self.lock:
            for m in msgs:
                m.settled = True


# --- HTTP ---------------------------------------------------------------------------------


class Reply(NamedTuple):
    status: int
    body: Any
    text: str


def call(client: httpx.Client, method: str, url: str, body: Any = None) -> Reply | None:
    """One request; None when the connection failed or died (the outcome is unknown)."""
    try:
        r = client.request(method, url, json=body)
    except httpx.TransportError:
        return None
    try:
        parsed = r.json()
    except ValueError:
        parsed = None
    return Reply(r.status_code, parsed, r.text[:300])


def http(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S)


# --- the workers --------------------------------------------------------------------------


@dataclass
class Phase:
    """What the workers of one phase share: where, what to record, when to stop."""

    url: str
    ledger: Ledger
    cycle: int
    deadline: float  # time.monotonic()
    drain: bool = False  # consumers ack everything (checks and the final drain)
    stop: threading.Event = field(default_factory=threading.Event)

    def done(self) -> bool:
        return self.stop.is_set() or time.monotonic() >= self.deadline


def plan_message(phase: Phase, rng: random.Random, name: str, topic: str) -> Msg:
    """A new message: a deliver time from the past to a few seconds ahead."""
    msg_id = f"c{phase.cycle:03d}.{name}"
    request: dict[str, Any] = {"msg_id": msg_id, "body": f"{topic}/{msg_id}"}
    roll, now = rng.random(), now_ms()
    if roll < 0.15:
        pass  # no time: due now
    elif roll < 0.30:
        request["deliver_at_ms"] = now - rng.randrange(1, PAST_MS)
    elif roll < 0.50:
        request["delay_ms"] = rng.randrange(0, AHEAD_MS)
    else:
        request["deliver_at_ms"] = now + rng.randrange(1, AHEAD_MS)
    if rng.random() < 0.2:
        request["tag"] = "crash"
        request["properties"] = {"cycle": str(phase.cycle)}
    return phase.ledger.new(topic, msg_id, request)


def send_one(client: httpx.Client, ledger: Ledger, m: Msg) -> int | None:
    """Send ``m`` (retrying 429s); returns the status, None when the reply was lost."""
    for _ in range(THROTTLE_RETRIES):
        r = call(client, "POST", messages_path(m.topic), m.request)
        if r is None:
            ledger.on_send_lost(m)
            return None
        if r.status == 429:
            ledger.count("throttled")
            time.sleep(THROTTLE_PAUSE_S)
            continue
        ledger.on_send(m, r.status, r.body, r.text)
        return r.status
    ledger.on_send_lost(m)  # not accepted: the recovery sends it again
    return None


def send_batch(client: httpx.Client, phase: Phase, rng: random.Random, name: str) -> None:
    ledger = phase.ledger
    topic = rng.choice(TOPICS)
    items = [
        plan_message(phase, rng, f"{name}.{i:02d}", topic) for i in range(rng.randint(2, BATCH_MAX))
    ]
    if rng.random() < SAME_BATCH_DUP:
        items.append(rng.choice(items))  # one msg_id twice in one batch: 201 then 200
    old = ledger.pick_accepted(rng) if rng.random() < OLD_ID_IN_BATCH else None
    if old is not None and old.topic == topic:
        items.insert(rng.randrange(len(items) + 1), old)
    send_items(client, ledger, topic, items)


def send_items(client: httpx.Client, ledger: Ledger, topic: str, items: Sequence[Msg]) -> None:
    """One batch send (retrying 429s); every item's reply is recorded, or its loss."""
    body = {"messages": [m.request for m in items]}
    for _ in range(THROTTLE_RETRIES):
        r = call(client, "POST", f"{messages_path(topic)}/batch", body)
        if r is None:
            break
        if r.status == 429:
            ledger.count("throttled")
            time.sleep(THROTTLE_PAUSE_S)
            continue
        ledger.count("batches")
        if r.status != 200:
            ledger.violate("batch-status", topic, items[0].msg_id, f"{r.status}: {r.text}")
            return
        for m, res in zip(items, r.body["results"], strict=True):
            ledger.on_send(m, res["status"], res, str(res.get("error", "")))
        return
    for m in items:
        ledger.on_send_lost(m)


def stormer(phase: Phase, rng: random.Random, at_s: float) -> None:
    """One batch of STORM_SIZE messages, every one due at the same millisecond."""
    ledger = phase.ledger
    until = time.monotonic() + at_s
    while not phase.done() and time.monotonic() < until:
        time.sleep(0.01)
    if phase.done():
        return
    topic = rng.choice(TOPICS)
    due = now_ms() + rng.randint(*STORM_AHEAD_MS)
    items = [
        ledger.new(
            topic, msg_id, {"msg_id": msg_id, "body": f"{topic}/{msg_id}", "deliver_at_ms": due}
        )
        for msg_id in (f"c{phase.cycle:03d}.storm.{i:04d}" for i in range(STORM_SIZE))
    ]
    ledger.count("storms")
    with http(phase.url) as c:
        send_items(c, ledger, topic, items)
    # Cancel some as the storm falls due, from several connections at once so that group
    # commits carry several cancels: the ones committed after the scanner took their keys
    # and before the deliverer moved them are the race of architecture.md's invariant 4
    # (each 200 must still mean never delivered).
    targets = rng.sample(items, STORM_CANCELS)
    cancellers = [
        threading.Thread(
            target=storm_canceller, args=(phase, targets[i::STORM_CANCELLERS], due), daemon=True
        )
        for i in range(STORM_CANCELLERS)
    ]
    for t in cancellers:
        t.start()
    for t in cancellers:
        t.join(JOIN_S)


def storm_canceller(phase: Phase, targets: Sequence[Msg], due: int) -> None:
    """Cancel ``targets`` one after the other from just before ``due`` on."""
    ledger = phase.ledger
    with http(phase.url) as c:
        until = time.monotonic() + max(0.0, (due - STORM_CANCEL_LEAD_MS - now_ms()) / 1000)
        while not phase.done() and time.monotonic() < until:
            time.sleep(0.001)
        for m in targets:
            if phase.done():
                return
            if ledger.claim_cancel(m):
                cancel(c, ledger, m)


def producer(phase: Phase, rng: random.Random, name: str) -> None:
    ledger = phase.ledger
    with http(phase.url) as c:
        for n in range(PRODUCER_OPS):
            if phase.done():
                return
            roll = rng.random()
            op = f"{name}.{n:04d}"
            if roll < 0.45:
                send_one(c, ledger, plan_message(phase, rng, op, rng.choice(TOPICS)))
            elif roll < 0.80:
                send_batch(c, phase, rng, op)
            elif roll < 0.93:
                again = ledger.pick_accepted(rng)  # must answer 200 with the first record
                if again is not None:
                    send_one(c, ledger, again)
            else:
                dead = ledger.pick_cancelled(rng)  # must answer 409
                if dead is not None:
                    send_one(c, ledger, dead)
            time.sleep(rng.uniform(*PAUSE_S))


def cancel(client: httpx.Client, ledger: Ledger, m: Msg) -> None:
    r = call(client, "DELETE", messages_path(m.topic, m.msg_id))
    if r is None:
        ledger.on_cancel_lost(m)
    else:
        ledger.on_cancel(m, r.status, r.body or {}, r.text)


def canceller(phase: Phase, rng: random.Random) -> None:
    with http(phase.url) as c:
        for _ in range(CANCELLER_OPS):
            if phase.done():
                return
            m = phase.ledger.pick_cancel(rng, near=rng.random() < 0.5)
            if m is not None:
                cancel(c, phase.ledger, m)
            time.sleep(rng.uniform(*CANCEL_PAUSE_S))


def settle(
    client: httpx.Client, ledger: Ledger, group: str, topic: str, op: str, held: list[Held]
) -> None:
    """Ack or nack ``held``; a lost reply leaves the outcome unknown (nothing recorded)."""
    r = call(
        client, "POST", f"{group_path(topic, group)}/{op}", {"receipts": [h.receipt for h in held]}
    )
    if r is None:
        return
    if r.status != 200:
        ledger.violate(f"{op}-status", topic, held[0].key[1], f"{r.status}: {r.text}")
        return
    ledger.on_settled(group, op, held, r.body["results"], now_ms())


def consumer(phase: Phase, rng: random.Random, group: str) -> None:
    ledger = phase.ledger
    with http(phase.url) as c:
        for n in range(CONSUMER_OPS):
            if phase.done():
                return
            topic = TOPICS[n % len(TOPICS)]
            invisible = AUDIT_INVISIBLE_MS if group == AUDIT else rng.randint(*WORK_INVISIBLE_MS)
            body = {"max_messages": RECEIVE_MAX, "wait_ms": WAIT_MS, "invisible_ms": invisible}
            sent = now_ms()
            r = call(c, "POST", f"{group_path(topic, group)}/receive", body)
            if r is None or r.status != 200:
                if r is not None:
                    ledger.violate("receive-status", topic, "-", f"{r.status}: {r.text}")
                time.sleep(0.05)
                continue
            held = ledger.on_received(group, topic, r.body["messages"], sent, invisible)
            acks, nacks = held, list[Held]()
            if group != AUDIT and not phase.drain:
                acks, nacks = [], []
                for h in held:
                    roll = rng.random()
                    if roll < WORK_ACK:
                        acks.append(h)
                    elif roll < WORK_ACK + WORK_NACK:
                        nacks.append(h)
                    else:
                        ledger.count(f"{group}_ignored")
            if acks:
                settle(c, ledger, group, topic, "ack", acks)
            if nacks:
                settle(c, ledger, group, topic, "nack", nacks)


def guarded(ledger: Ledger, fn: Callable[..., None], *args: Any) -> threading.Thread:
    """A started worker thread whose crash is recorded as a run error, never lost."""

    def body() -> None:
        try:
            fn(*args)
        except BaseException:
            ledger.error(f"worker {fn.__name__} crashed:\n{traceback.format_exc()}")

    thread = threading.Thread(target=body, name=f"crash-{fn.__name__}", daemon=True)
    thread.start()
    return thread


# --- the loop -----------------------------------------------------------------------------


class RunFailed(Exception):
    """The run cannot go on (the server will not start, a check cannot reach it)."""


@dataclass(frozen=True)
class Config:
    cycles: int = DEFAULT_CYCLES
    seed: int = 0
    load_s: float = LOAD_S
    data_dir: Path | None = None  # None: a fresh temp dir, removed after a clean run
    keep: bool = False  # keep the data dir even after a clean run


@dataclass
class Summary:
    seed: int
    cycles: int
    data_dir: Path
    stats: Counter[str]
    ready_s: list[float]
    kills_at_s: list[float]
    violations: list[Violation]
    errors: list[str]
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return not self.violations and not self.errors

    def report(self) -> str:
        s = self.stats
        ready = self.ready_s or [0.0]
        lines = [
            f"crash loop: seed={self.seed} cycles={self.cycles} elapsed={self.elapsed_s:.1f}s",
            f"  sends: {s['messages']} messages, {s['acknowledged']} acknowledged "
            f"(201/200), {s['duplicates_200']} resends answered 200, {s['batches']} batches "
            f"({s['storms']} storms of {STORM_SIZE} due in one ms), "
            f"{s['throttled']} throttled",
            f"  lost in a crash: {s['lost_landed'] + s['lost_missing']} sends unanswered "
            f"({s['lost_landed']} had landed, {s['lost_missing']} had not; each sent again: "
            f"now exactly one), {s['resend_replies_lost']} resends, "
            f"{s['cancel_replies_lost']} cancels (sent again)",
            f"  cancels: {s['cancelled']} cancelled (200), {s['cancel_conflicts']} already "
            f"delivered (409), {s['resurrections_refused']} resends of cancelled ids refused (409)",
            f"  delivered: {s['delivered']} (topic logs read exactly once by a fresh group), "
            f"cancelled at the end: {s['final_cancelled']}",
            f"  audit group: {s['audit_receives']} receives, {s['audit_acked']} acks, "
            f"{s['audit_redeliveries']} redeliveries, {s['audit_repeat_first']} repeated first "
            "deliveries without a confirmed ack",
            f"  work group: {s['work_receives']} receives, {s['work_acked']} acks, "
            f"{s['work_nacked']} nacks, {s['work_ignored']} left to expire, "
            f"{s['work_redeliveries']} redeliveries, {s['work_dead']} dead",
            f"  store: {s['torn_wal_tails']} opens dropped a torn WAL tail (a write the kill "
            "cut short, never acknowledged); a repair or any other corruption is a violation",
            f"  restart to ready: max {max(ready):.2f}s, mean {sum(ready) / len(ready):.2f}s "
            f"over {len(self.ready_s)} starts (limit {READY_LIMIT_S:.0f}s)",
            f"  violations: {len(self.violations)}"
            + (f", run errors: {len(self.errors)}" if self.errors else ""),
        ]
        if self.violations:
            lines.append(f"  FAILED with seed {self.seed} (rerun: --seed {self.seed})")
            kinds = Counter(v.kind for v in self.violations)
            lines.append("  by kind: " + ", ".join(f"{k}={n}" for k, n in kinds.most_common()))
            ids = sorted({f"{v.topic}/{v.msg_id}" for v in self.violations})
            lines.append(f"  violating msg_ids ({len(ids)}): {' '.join(ids[:200])}")
            for v in self.violations[:SHOW_VIOLATIONS]:
                lines.append(f"    {v.kind}: {v.topic}/{v.msg_id}: {v.detail}")
        for e in self.errors[:5]:
            lines.append(f"  run error: {e}")
        if not self.ok:
            lines.append(f"  data dir kept: {self.data_dir}")
        return "\n".join(lines)


class CrashLoop:
    def __init__(self, config: Config, out: TextIO = sys.stdout) -> None:
        self.config = config
        self.out = out
        self.rng = random.Random(config.seed)
        self.ledger = Ledger()
        self.own_dir = config.data_dir is None
        if config.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="rocktimer-crash-")) / "data"
        else:
            self.data_dir = config.data_dir
        if self.data_dir.exists() and any(self.data_dir.iterdir()):
            raise ValueError(f"{self.data_dir} is not empty: the ledger must see every message")
        self.server = Server(self.data_dir, env=SERVER_ENV)
        self.ready_s: list[float] = []
        self.kills_at_s: list[float] = []
        self.log_offset = 0

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def run(self) -> Summary:
        started = time.monotonic()
        self.say(
            f"crash loop: seed={self.config.seed} cycles={self.config.cycles} "
            f"data_dir={self.data_dir}"
        )
        try:
            self.start()
            self.put_group_settings()
            for cycle in range(1, self.config.cycles + 1):
                self.cycle(cycle)
            self.final()
        except RunFailed as exc:
            self.ledger.error(str(exc))
        finally:
            if self.server.proc is not None:
                self.server.kill()
        summary = Summary(
            seed=self.config.seed,
            cycles=self.config.cycles,
            data_dir=self.data_dir,
            stats=self.ledger.stats,
            ready_s=self.ready_s,
            kills_at_s=self.kills_at_s,
            violations=self.ledger.violations,
            errors=self.ledger.errors,
            elapsed_s=time.monotonic() - started,
        )
        if summary.ok and self.own_dir and not self.config.keep:
            shutil.rmtree(self.data_dir.parent, ignore_errors=True)
        return summary

    # --- one cycle -----------------------------------------------------------------------

    def cycle(self, cycle: int) -> None:
        before = len(self.ledger.violations)
        sent = self.ledger.stats["messages"]
        kill_at = self.load(cycle)
        self.start()
        self.recover()
        self.check(final=False)
        s = self.ledger.stats
        new = self.ledger.violations[before:]
        self.say(
            f"cycle {cycle}/{self.config.cycles}: killed at {kill_at:.2f}s, "
            f"{s['messages'] - sent} new messages, restart {self.ready_s[-1]:.2f}s, "
            f"violations {len(new)}"
            + (f" (seed {self.config.seed}): {sorted({v.msg_id for v in new})[:20]}" if new else "")
        )

    def load(self, cycle: int) -> float:
        """Run every worker, SIGKILL the server at a random instant, stop the workers."""
        kill_at = self.rng.uniform(MIN_KILL_S, self.config.load_s)
        self.kills_at_s.append(kill_at)
        self.ledger.prune(now_ms())
        phase = Phase(self.server.url, self.ledger, cycle, time.monotonic() + self.config.load_s)
        threads = [
            *(
                guarded(self.ledger, producer, phase, self.child_rng(), f"p{i}")
                for i in range(PRODUCERS)
            ),
            guarded(self.ledger, canceller, phase, self.child_rng()),
            guarded(self.ledger, consumer, phase, self.child_rng(), AUDIT),
            *(
                guarded(self.ledger, consumer, phase, self.child_rng(), WORK)
                for _ in range(WORK_CONSUMERS)
            ),
        ]
        if self.rng.random() < STORM_CHANCE:  # in the first half: most fall due before the kill
            storm_at = self.rng.uniform(0, kill_at / 2)
            threads.append(guarded(self.ledger, stormer, phase, self.child_rng(), storm_at))
        time.sleep(kill_at)
        proc = self.server.proc
        if proc is not None and proc.poll() is not None:
            self.ledger.violate(
                "server-died", "-", "-", f"exit code {proc.returncode} before the kill"
            )
        self.server.kill()
        phase.stop.set()
        self.join(threads)
        return kill_at

    def child_rng(self) -> random.Random:
        return random.Random(self.rng.getrandbits(64))

    def join(self, threads: Sequence[threading.Thread]) -> None:
        for t in threads:
            t.join(JOIN_S)
            if t.is_alive():
                raise RunFailed(f"worker {t.name} did not stop within {JOIN_S}s")

    def start(self) -> None:
        """Start (or restart) the server on the data dir; time it, read its logs."""
        self.server.port = free_port()  # a fresh one: another process may hold the last
        self.server.extra_env = {
            **SERVER_ENV,
            "ROCKTIMER_SCAN_CHUNK": str(self.rng.choice(SCAN_CHUNKS)),
            "ROCKTIMER_PUT_QUEUE_CHUNKS": str(self.rng.choice(PUT_QUEUE_CHUNKS)),
        }
        began = time.monotonic()
        try:
            self.server.start()
        except RuntimeError as exc:
            raise RunFailed(f"the server did not start: {exc}") from None
        ready = time.monotonic() - began
        self.ready_s.append(ready)
        if ready > READY_LIMIT_S:
            self.ledger.violate("slow-restart", "-", "-", f"ready after {ready:.1f}s")
        self.check_logs()

    def check_logs(self) -> None:
        """The open needed no repair (RocksDB's info LOG), the server logged no error."""
        torn, problems = store_open_problems((self.data_dir / "LOG").read_text(errors="replace"))
        self.ledger.count("torn_wal_tails", torn)
        for line in problems:
            self.ledger.violate("store-open", "-", "-", f"RocksDB LOG: {line}")
        text = self.server.logs()
        new, self.log_offset = text[self.log_offset :], len(text)
        for marker in LOG_MARKERS_SERVER:
            if marker in new:
                at = new.index(marker)
                excerpt = new[max(0, at - 200) : at + 800]
                self.ledger.violate("server-log", "-", "-", f"{marker.strip()}: {excerpt}")

    def put_group_settings(self) -> None:
        with http(self.server.url) as c:
            for topic in TOPICS:
                for group in (AUDIT, WORK):
                    r = call(c, "PUT", group_path(topic, group), GROUP_SETTINGS)
                    if r is None or r.status != 200:
                        raise RunFailed(f"PUT group settings: {r}")

    def recover(self) -> None:
        """What a client does after its server came back: resend every unanswered send
        (same msg_id, same body), resend every cancel whose reply was lost."""
        ledger = self.ledger
        with http(self.server.url) as c:
            for m in ledger.unanswered():
                before = call(c, "GET", messages_path(m.topic, m.msg_id))
                if before is None:
                    raise RunFailed("the server went away during recovery")
                landed = before.status == 200
                ledger.count("lost_landed" if landed else "lost_missing")
                status = send_one(c, ledger, m)
                if status is None:
                    raise RunFailed(f"resend of {m.topic}/{m.msg_id} got no reply")
                if (landed and status == 201) or (not landed and status == 200):
                    ledger.violate(
                        "resend",
                        m.topic,
                        m.msg_id,
                        f"GET said {before.status} before the resend, the resend answered {status}",
                    )
            for m in ledger.lost_cancels():
                cancel(c, ledger, m)
                if m.cancel is Cancel.LOST:
                    raise RunFailed(f"cancel of {m.topic}/{m.msg_id} got no reply")

    # --- checks --------------------------------------------------------------------------

    def statuses(self, c: httpx.Client, msgs: Sequence[Msg]) -> list[tuple[Msg, Reply]]:
        def get(m: Msg) -> tuple[Msg, Reply]:
            r = call(c, "GET", messages_path(m.topic, m.msg_id))
            if r is None:
                raise RunFailed("the server went away during a check")
            return m, r

        with concurrent.futures.ThreadPoolExecutor(STATUS_THREADS) as pool:
            return list(pool.map(get, msgs))

    def check(self, final: bool) -> list[Msg]:
        """GET every message not settled yet (all of them when ``final``), wait out the ones
        just due, then drain the audit group until it has read every delivered one.
        Returns the delivered messages."""
        ledger = self.ledger
        delivered: list[Msg] = []
        cancelled: list[Msg] = []
        due: list[Msg] = []
        with http(self.server.url) as c:
            checked_at = now_ms()
            msgs = ledger.to_check(everything=final)
            if not final:  # a settled state must stay: a tombstone never fades, and so on
                msgs += ledger.settled_sample(self.rng, SPOT_CHECKS)
            for m, r in self.statuses(c, msgs):
                state = ledger.check_status(m, r.status, r.body, r.text)
                if state == "delivered":
                    delivered.append(m)
                elif state == "cancelled":
                    cancelled.append(m)
                elif state == "scheduled" and (final or (m.deliver_at_ms or 0) <= checked_at):
                    due.append(m)
            delivered += self.wait_delivered(c, due)
        if final:
            self.drain(
                [AUDIT, WORK, WORK],
                lambda: not ledger.audit_missing(delivered),
                FINAL_DRAIN_S,
                quiet=True,
            )
        else:
            self.drain([AUDIT], lambda: not ledger.audit_missing(delivered), AUDIT_DRAIN_S)
        missing = ledger.audit_missing(delivered)
        for m in missing:
            ledger.violate(
                "not-in-log",
                m.topic,
                m.msg_id,
                "status delivered, but the audit group never got it",
            )
        ledger.settle([m for m in delivered if m not in missing])
        ledger.settle(m for m in cancelled if m.cancel is Cancel.OK)
        return delivered

    def wait_delivered(self, c: httpx.Client, due: list[Msg]) -> list[Msg]:
        """Messages whose time has come must turn delivered within DUE_GRACE_MS."""
        delivered: list[Msg] = []
        if not due:
            return delivered
        deadline = max(m.deliver_at_ms or 0 for m in due) + DUE_GRACE_MS
        while due:
            time.sleep(0.1)
            waiting: list[Msg] = []
            for m, r in self.statuses(c, due):
                state = self.ledger.check_status(m, r.status, r.body, r.text)
                if state == "delivered":
                    delivered.append(m)
                elif state == "scheduled":
                    waiting.append(m)
            due = waiting
            if now_ms() > deadline:
                break
        for m in due:
            self.ledger.violate(
                "stuck",
                m.topic,
                m.msg_id,
                f"still scheduled {now_ms() - (m.deliver_at_ms or 0)} ms after its deliver time",
            )
        return delivered

    def drain(
        self,
        groups: Sequence[str],
        until: Callable[[], bool],
        timeout_s: float,
        quiet: bool = False,
    ) -> None:
        """Consume ``groups`` acking everything until ``until()`` holds (and, with
        ``quiet``, nothing was received for QUIET_S), or ``timeout_s``."""
        phase = Phase(self.server.url, self.ledger, 0, time.monotonic() + timeout_s, drain=True)
        threads = [guarded(self.ledger, consumer, phase, self.child_rng(), g) for g in groups]
        last, last_change = self.ledger.receives(), time.monotonic()
        while not phase.done():
            time.sleep(0.05)
            now, count = time.monotonic(), self.ledger.receives()
            if count != last:
                last, last_change = count, now
            if until() and (not quiet or now - last_change >= QUIET_S):
                break
        phase.stop.set()
        self.join(threads)

    def final(self) -> None:
        """Clean restart, everything due, drain, then the exact checks."""
        code = self.server.terminate()
        if code not in (0, -15):  # uvicorn re-raises SIGTERM after its graceful stop
            self.ledger.violate("unclean-stop", "-", "-", f"SIGTERM exit code {code}")
        self.start()
        self.recover()
        ledger = self.ledger
        last_due = max((m.deliver_at_ms or 0 for m in ledger.to_check(everything=True)), default=0)
        time.sleep(max(0.0, (last_due + FINAL_DUE_MARGIN_MS - now_ms()) / 1000))
        delivered = self.check(final=True)
        ledger.count("delivered", len(delivered))
        ledger.count("final_cancelled", sum(m.cancel is Cancel.OK for m in ledger.all_messages()))
        with http(self.server.url) as c:
            self.check_group_views(c, delivered)
            self.read_logs_once(c, delivered)
            r = call(c, "GET", "/readyz")
            if r is None or r.status != 200:
                raise RunFailed(f"/readyz at the end: {r}")
            if r.body.get("pending_timers") != 0:
                ledger.violate(
                    "pending-timers", "-", "-", f"/readyz says {r.body} with nothing scheduled"
                )
        code = self.server.terminate()
        if code not in (0, -15):
            ledger.violate("unclean-stop", "-", "-", f"SIGTERM exit code {code}")
        self.check_logs()

    def check_group_views(self, c: httpx.Client, delivered: Sequence[Msg]) -> None:
        """A delivered message whose ack we never saw confirmed must be acked server-side."""
        for group in (AUDIT, WORK):
            for m in delivered:
                if self.ledger.is_acked(group, m):
                    continue
                r = call(c, "GET", f"{group_path(m.topic, group)}/messages/{m.msg_id}")
                if r is None:
                    raise RunFailed("the server went away during the group checks")
                state = r.body.get("state") if r.status == 200 and r.body else None
                if state == "acked":
                    self.ledger.count(f"{group}_acks_lost_but_landed")
                elif state == "dead" and group == WORK:
                    self.ledger.count(f"{group}_dead")
                else:
                    self.ledger.violate(
                        "not-acked",
                        m.topic,
                        m.msg_id,
                        f"group {group} after the drain: {r.status} {r.text}",
                    )

    def read_logs_once(self, c: httpx.Client, delivered: Sequence[Msg]) -> None:
        """A fresh group reads each topic log from the start: each delivered message once."""
        ledger = self.ledger
        copies: Counter[Key] = Counter()
        pages = len(ledger.all_messages()) // FINAL_READ_PAGE + 10
        for topic in TOPICS:
            empty, last_due = 0, 0
            for _ in range(pages):
                body = {
                    "max_messages": FINAL_READ_PAGE,
                    "wait_ms": 0,
                    "invisible_ms": FINAL_READ_INVISIBLE_MS,
                }
                sent = now_ms()
                r = call(c, "POST", f"{group_path(topic, FINAL_READER)}/receive", body)
                if r is None or r.status != 200:
                    raise RunFailed(f"final read of {topic}: {r}")
                items = r.body["messages"]
                if not items:
                    empty += 1
                    if empty == 2:
                        break
                    time.sleep(WAIT_MS / 1000)
                    continue
                ledger.on_received(FINAL_READER, topic, items, sent, FINAL_READ_INVISIBLE_MS)
                for item in items:
                    copies[(topic, item["msg_id"])] += 1
                    m = ledger.msgs.get((topic, item["msg_id"]))
                    if m is not None and m.timer_path:  # api.md: the log is in deliver_at order
                        if item["deliver_at_ms"] < last_due:
                            ledger.violate(
                                "order",
                                topic,
                                m.msg_id,
                                f"deliver_at {item['deliver_at_ms']} after one at {last_due}",
                            )
                        last_due = max(last_due, item["deliver_at_ms"])
                    if item["attempt"] != 1:
                        ledger.violate(
                            "final-read", topic, item["msg_id"], f"attempt {item['attempt']}"
                        )
        expected = {m.key for m in delivered}
        for m in ledger.all_messages():
            want = 1 if m.key in expected else 0
            if copies[m.key] != want:
                ledger.violate(
                    "log-copies",
                    m.topic,
                    m.msg_id,
                    f"{copies[m.key]} copies in the topic log, expected {want} "
                    f"(cancel: {m.cancel.value})",
                )
        for key in copies.keys() - ledger.msgs.keys():
            ledger.violate("never-sent", *key, "in a topic log, never sent")


def run(config: Config, out: TextIO = sys.stdout) -> Summary:
    """Run the crash loop; the summary says what was sent, lost, checked and violated."""
    return CrashLoop(config, out).run()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.reliability.crash_loop",
        description="SIGKILL the real server under load; check nothing acknowledged is lost.",
    )
    parser.add_argument("--cycles", type=int, default=DEFAULT_CYCLES)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    parser.add_argument("--load-s", type=float, default=LOAD_S, help="longest load per cycle")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument("--keep", action="store_true", help="keep the data dir after a clean run")
    args = parser.parse_args(argv)
    if args.cycles < 1 or args.load_s <= MIN_KILL_S:
        parser.error(f"--cycles must be >= 1 and --load-s > {MIN_KILL_S}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    summary = run(Config(args.cycles, seed, args.load_s, args.data_dir, args.keep))
    print(summary.report(), flush=True)
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
