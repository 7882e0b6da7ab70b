"""The crash loop's load: HTTP calls and the worker threads (producers, cancellers, a
storm, consumers) that drive the server and write every outcome into the ledger."""

from __future__ import annotations

import random
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import httpx

from tests.reliability.ledger import (
    AUDIT,
    Held,
    Ledger,
    Msg,
    group_path,
    messages_path,
    now_ms,
)

TOPICS = ("crash-a", "crash-b")

PAST_MS = 2_000  # deliver times from this far in the past (due at once) ...

AHEAD_MS = 4_000  # ... to this far ahead: everything falls due within the run

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

HTTP_TIMEOUT_S = 10.0

THROTTLE_RETRIES = 5  # 429s in a row before a send is left unanswered (sent again later)

THROTTLE_PAUSE_S = 0.2

JOIN_S = HTTP_TIMEOUT_S + 5

STORM_SIZE = 600  # > workers.ops.messages.RANGE_DELETE_MIN: one move may take a range delete

STORM_AHEAD_MS = (200, 1_500)

STORM_CANCELS = 60  # storm messages cancelled from just before their due time on ...

STORM_CANCELLERS = 6  # ... by this many connections at once

STORM_CANCEL_LEAD_MS = 2


# --- HTTP ---------------------------------------------------------------------------------


class Reply(NamedTuple):
    status: int
    body: Any
    text: str


GET_TRIES = 3  # a GET changes nothing: a keep-alive connection closed as it was reused is retried
# The 503 of a partition whose worker is down (app/cluster/relay.py): its owner may have done
# the request before it died, so the outcome is unknown, as with a lost reply.
PARTITION_DOWN = "is not served right now"
PARTITION_DOWN_PAUSE_S = 0.2  # after a lost reply; Retry-After says 1 s, shorter keeps timing


def call(client: httpx.Client, method: str, url: str, body: Any = None) -> Reply | None:
    """One request; None when the connection failed or died, or the topic's partition was
    down (the outcome is unknown)."""
    for tries_left in reversed(range(GET_TRIES if method == "GET" else 1)):
        try:
            r = client.request(method, url, json=body)
            break
        except httpx.TransportError:
            if not tries_left:
                time.sleep(PARTITION_DOWN_PAUSE_S)  # the server is gone: back off as for a 503
                return None
            time.sleep(0.05)
    if r.status_code == 503 and PARTITION_DOWN in r.text:
        time.sleep(PARTITION_DOWN_PAUSE_S)  # a client backs off before its next request
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
