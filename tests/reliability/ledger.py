"""The crash loop's ledger: what every request was, what came back, and the checks of
the server's answers against it (see tools/crash_loop.py for the whole story)."""

from __future__ import annotations

import enum
import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

AUDIT = "audit"  # receives and acks, nothing else: its reads are the topic log

NEAR_DUE_MS = 400  # a cancel of a message this close to due races the scanner

Key = tuple[str, str]  # (topic, msg_id): a message's identity


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
    # ... by a reply the server gives only once durable (a send's 201/200, a cancel's 409):
    # a power cut cannot undo it, as it can undo a delivery only read (status, receive)
    delivered_durably: bool = False
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
        # Cluster mode: (began, ended) ms of each failover; ended None while it lasts.
        self.failovers: list[tuple[int, int | None]] = []

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
            m.delivered = m.delivered_durably = True
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
                m.delivered = m.delivered_durably = True
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
                elif status == "unknown" and self._undone_by_failover(h, reply_ms):
                    self.stats[f"{group}_{op}_undone_by_failover"] += 1
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

    def failover_began(self, at_ms: int) -> None:
        """A disruption that may move partitions to other owners (cluster mode)."""
        with self.lock:
            self.failovers.append((at_ms, None))

    def failover_ended(self, at_ms: int) -> None:
        """The disruption's partitions take sends again."""
        with self.lock:
            began, _ = self.failovers[-1]
            self.failovers[-1] = (began, at_ms)

    def _undone_by_failover(self, h: Held, reply_ms: int) -> bool:
        """A receive that a failover may have undone (docs/cluster.md: a receive is answered
        once committed on its owner, before its changelog record): it was sent before a
        failover ended, and settled after that failover began."""
        return any(
            h.sent_ms <= (ended if ended is not None else reply_ms) and reply_ms >= began
            for began, ended in self.failovers
        )

    def power_cut(self) -> None:
        """A power cut (tools/powerloss.py): a delivery that was only read
        (a status, a receive) may have been in the unsynced tail of the WAL; the message
        may be scheduled again, and delivered again (at least once)."""
        with self.lock:
            for m in self.msgs.values():
                if m.delivered and not m.delivered_durably:
                    m.delivered = False
                    self.stats["deliveries_read_before_cut"] += not m.settled

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
