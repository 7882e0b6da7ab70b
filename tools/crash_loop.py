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
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx

from tests.reliability.ledger import (
    AUDIT,
    Cancel,
    Key,
    Ledger,
    Msg,
    Violation,
    group_path,
    messages_path,
    now_ms,
)
from tests.reliability.load import (
    JOIN_S,
    STORM_SIZE,
    TOPICS,
    WAIT_MS,
    Phase,
    Reply,
    call,
    cancel,
    canceller,
    consumer,
    guarded,
    http,
    producer,
    send_one,
    stormer,
)
from tests.support.process import free_port, workers_of
from tests.support.server import Server

WORK = "work"  # acks, nacks or lets the invisibility run out

FINAL_READER = "final-reader"  # created at the very end: reads every log from the start

GROUP_SETTINGS: dict[str, Any] = {
    "retry": {"policy": "fixed", "interval_ms": 200},  # nacked messages come back fast
    "max_attempts": 64,
}

DEFAULT_CYCLES = 50

LOAD_S = 3.0  # the longest load of one cycle; the kill lands at a random instant in it

MIN_KILL_S = 0.3  # every worker is under way before a kill can land

PRODUCERS = 3

WORK_CONSUMERS = 2

READY_LIMIT_S = 10.0  # restart to /readyz 200, or it is a violation

DUE_GRACE_MS = 2_000  # a due message still "scheduled" this long after deliver_at is stuck

AUDIT_DRAIN_S = 6.0  # > AUDIT_INVISIBLE_MS + a restart: what a lost receive held is back

FINAL_DRAIN_S = 60.0

QUIET_S = 3.0  # > the longest invisibility + retry interval: nothing more can come back

FINAL_DUE_MARGIN_MS = 300

STATUS_THREADS = 4  # parallel GETs in a check

SPOT_CHECKS = 200  # settled messages checked again at every cycle

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


_RECOVERY_WALS = re.compile(r'"event": "recovery_started", "wal_files": \[([0-9, ]*)\]')
# RocksDB says either, depending on where the kill cut the last record: inside its header
# ("trailing data") or inside its body, the header written ("truncated record body").
_TORN_TAIL = re.compile(
    r"/(\d+)\.log: dropping \d+ bytes; Corruption: "
    r"(error reading trailing data|truncated record body)"
)


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
    workers: int = 1  # ROCKTIMER_WORKERS: more than one is a partitioned data dir


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
    # cluster mode (tools/cluster_crash.py): from each disruption until a send on the
    # partitions it hit was answered 201 again
    failover_s: list[float] = field(default_factory=list)

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
            *(
                [
                    f"  failover (disruption to the next 201 on its partitions): "
                    f"p50 {sorted(self.failover_s)[len(self.failover_s) // 2]:.2f}s, "
                    f"max {max(self.failover_s):.2f}s over {len(self.failover_s)}",
                    f"  cluster: {s['due_in_failover']} messages due during failovers, "
                    f"{s['failover_probes']} probe sends, sends queued at a paused owner "
                    "answered "
                    + (
                        ", ".join(
                            f"{k.removeprefix('paused_owner_')}: {n}"
                            for k, n in sorted(s.items())
                            if k.startswith("paused_owner_")
                        )
                        or "-"
                    )
                    + f", {s['records_after_fence']} records after a new owner's fence",
                    "  receipts a failover undid (their receive answered before its changelog "
                    "record, then an ack or nack answered unknown): "
                    + str(sum(n for k, n in s.items() if k.endswith("_undone_by_failover"))),
                ]
                if self.failover_s
                else []
            ),
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
        self.failover_s: list[float] = []
        self.log_offset = 0
        self.due_floor_ms = 0  # a due message may still be scheduled until this + DUE_GRACE_MS

    @property
    def url(self) -> str:
        """Where the clients of the load and of the checks go."""
        return self.server.url

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
            self.shutdown()
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
            failover_s=self.failover_s,
        )
        if summary.ok and self.own_dir and not self.config.keep:
            shutil.rmtree(self.data_dir.parent, ignore_errors=True)
        return summary

    def shutdown(self) -> None:
        """Whatever happened: no process of the run is left behind."""
        if self.server.proc is not None:
            self.server.kill()

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
        phase = Phase(self.url, self.ledger, cycle, time.monotonic() + self.config.load_s)
        threads = self.start_workers(phase, kill_at)
        worker_kill = None
        if self.config.workers > 1:  # one worker alone first, then the whole server
            at = self.rng.uniform(0, kill_at * 0.8)
            worker_kill = threading.Timer(at, self.kill_one, args=(self.rng.randrange(2**32),))
            worker_kill.start()
        time.sleep(kill_at)
        if worker_kill is not None:
            worker_kill.cancel()
            worker_kill.join()
        proc = self.server.proc
        if proc is not None and proc.poll() is not None:
            self.ledger.violate(
                "server-died", "-", "-", f"exit code {proc.returncode} before the kill"
            )
        self.crash()
        phase.stop.set()
        self.join(threads)
        return kill_at

    def start_workers(self, phase: Phase, kill_at: float) -> list[threading.Thread]:
        """The load's worker threads, started: producers, a canceller, the consumers, and
        most cycles a storm in the first half before ``kill_at``."""
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
        return threads

    def kill_one(self, pick: int) -> None:
        """SIGKILL one worker: the supervisor starts it again, the others go on serving."""
        proc = self.server.proc
        if proc is None or proc.poll() is not None:
            return
        workers = workers_of(proc.pid)
        if workers:
            os.kill(workers[sorted(workers)[pick % len(workers)]], signal.SIGKILL)
            self.ledger.count("worker_kills")

    def crash(self) -> None:
        """The crash itself: SIGKILL the server, and with workers each worker too, the
        supervisor stopped first (else it would start one again; and a worker it outlives
        gets SIGTERM, not a kill). tools/powerloss.py also cuts the power."""
        proc = self.server.proc
        if self.config.workers > 1 and proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGSTOP)
            for pid in workers_of(proc.pid).values():
                os.kill(pid, signal.SIGKILL)
        self.server.kill()

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
            "ROCKTIMER_WORKERS": str(self.config.workers),
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
        logs = [self.data_dir / "LOG"] if self.config.workers == 1 else []
        logs += sorted(self.data_dir.glob("p[0-9]*/LOG"))  # a partitioned data dir: one each
        for path in logs:
            torn, problems = store_open_problems(path.read_text(errors="replace"))
            self.ledger.count("torn_wal_tails", torn)
            for line in problems:
                self.ledger.violate("store-open", "-", "-", f"RocksDB LOG ({path}): {line}")
        text = self.server.logs()
        new, self.log_offset = text[self.log_offset :], len(text)
        for marker in LOG_MARKERS_SERVER:
            if marker in new:
                at = new.index(marker)
                excerpt = new[max(0, at - 200) : at + 800]
                self.ledger.violate("server-log", "-", "-", f"{marker.strip()}: {excerpt}")

    def put_group_settings(self) -> None:
        with http(self.url) as c:
            for topic in TOPICS:
                for group in (AUDIT, WORK):
                    r = call(c, "PUT", group_path(topic, group), GROUP_SETTINGS)
                    if r is None or r.status != 200:
                        raise RunFailed(f"PUT group settings: {r}")

    def recover(self) -> None:
        """What a client does after its server came back: resend every unanswered send
        (same msg_id, same body), resend every cancel whose reply was lost."""
        ledger = self.ledger
        with http(self.url) as c:
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
        with http(self.url) as c:
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
        deadline = max(self.due_floor_ms, *(m.deliver_at_ms or 0 for m in due)) + DUE_GRACE_MS
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
        phase = Phase(self.url, self.ledger, 0, time.monotonic() + timeout_s, drain=True)
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
        self.restart_clean()
        self.recover()
        ledger = self.ledger
        last_due = max((m.deliver_at_ms or 0 for m in ledger.to_check(everything=True)), default=0)
        time.sleep(max(0.0, (last_due + FINAL_DUE_MARGIN_MS - now_ms()) / 1000))
        delivered = self.check(final=True)
        ledger.count("delivered", len(delivered))
        ledger.count("final_cancelled", sum(m.cancel is Cancel.OK for m in ledger.all_messages()))
        with http(self.url) as c:
            self.check_group_views(c, delivered)
            self.read_logs_once(c, delivered)
        for url in self.ready_urls():
            with http(url) as c:
                r = call(c, "GET", "/readyz")
            if r is None or r.status != 200:
                raise RunFailed(f"/readyz of {url} at the end: {r}")
            if r.body.get("pending_timers") != 0:
                ledger.violate(
                    "pending-timers", "-", "-", f"/readyz says {r.body} with nothing scheduled"
                )
        self.stop_clean()
        self.check_logs()

    def stopped(self, code: int | None) -> None:
        """The exit code of a SIGTERM stop: 0, or uvicorn re-raising SIGTERM after its
        graceful stop."""
        if code not in (0, -15):
            self.ledger.violate("unclean-stop", "-", "-", f"SIGTERM exit code {code}")

    def ready_urls(self) -> list[str]:
        """Whose /readyz must report no pending timer at the end."""
        return [self.url]

    def restart_clean(self) -> None:
        """The final phase's clean stop (SIGTERM) and start."""
        self.stopped(self.server.terminate())
        self.start()

    def stop_clean(self) -> None:
        self.stopped(self.server.terminate())

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
        prog="python -m tools.crash_loop",
        description="SIGKILL the real server under load; check nothing acknowledged is lost.",
    )
    parser.add_argument("--cycles", type=int, default=DEFAULT_CYCLES)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    parser.add_argument("--load-s", type=float, default=LOAD_S, help="longest load per cycle")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument("--keep", action="store_true", help="keep the data dir after a clean run")
    parser.add_argument("--workers", type=int, default=1, help="ROCKTIMER_WORKERS (partitions)")
    cluster = parser.add_argument_group(
        "cluster mode", "3 NATS servers and --nodes rocktimer nodes (tools/cluster_crash.py)"
    )
    cluster.add_argument("--cluster", action="store_true", help="run against a cluster")
    cluster.add_argument("--nodes", type=int, default=3)
    cluster.add_argument(
        "--disruptions",
        default="kill-owner",
        help="comma-separated, one per cycle in turn: kill-owner, pause-owner, kill-nats, "
        "restart-node, restart-nats",
    )
    cluster.add_argument("--lease-ms", type=int, default=None, help="ROCKTIMER_LEASE_MS")
    cluster.add_argument(
        "--kills-per-cycle", type=int, default=1, help="kill-owner: owners killed under one load"
    )
    cluster.add_argument(
        "--sync-interval", default=None, help="the NATS servers' sync_interval (e.g. always)"
    )
    args = parser.parse_args(argv)
    if args.cycles < 1 or args.load_s <= MIN_KILL_S:
        parser.error(f"--cycles must be >= 1 and --load-s > {MIN_KILL_S}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    if args.cluster:
        from tools import cluster_crash

        disruptions = tuple(d.strip() for d in args.disruptions.split(",") if d.strip())
        if not set(disruptions) <= set(cluster_crash.DISRUPTIONS) or args.nodes < 2:
            parser.error(f"--disruptions among {cluster_crash.DISRUPTIONS}, --nodes >= 2")
        summary = cluster_crash.run(
            cluster_crash.ClusterConfig(
                args.cycles,
                seed,
                args.load_s,
                args.data_dir,
                args.keep,
                nodes=args.nodes,
                disruptions=disruptions,
                lease_ms=args.lease_ms,
                sync_interval=args.sync_interval,
                kills_per_cycle=max(1, args.kills_per_cycle),
            )
        )
        print(summary.report(), flush=True)
        return 0 if summary.ok else 1
    summary = run(Config(args.cycles, seed, args.load_s, args.data_dir, args.keep, args.workers))
    print(summary.report(), flush=True)
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
