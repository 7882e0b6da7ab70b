"""The crash loop against a cluster: the same load, ledger and checks as tools/crash_loop.py
(read it first), over 3 real NATS servers and 3 rocktimer nodes on loopback
(tests/support/cluster.py), with a disruption per cycle instead of a single server's SIGKILL.
``python -m tools.crash_loop --cluster`` runs it (``make crash-cluster``);
tests/cluster/ runs it with each disruption the issue names.

Each cycle:

1. **Settle.** Nodes restarted by the last cycle answer /readyz, every partition has an
   owner among the live nodes (KV ``rocktimer_owners``).
2. **Load** through a *front* node that the disruption leaves alone: the requests for the
   topics' partitions are forwarded by it to their owners. Shortly before the disruption, a
   batch of messages due *during* the failover goes to the partition that will lose its owner.
3. **Disrupt**, at a random instant, while the load goes on:
   ``kill-owner``: SIGKILL the node that owns a crash topic's partition;
   ``pause-owner``: SIGSTOP it past its lease, with sends queued at it meanwhile (its kernel
   still accepts connections) and some of their msg_ids sent to the new owner first, then
   SIGCONT: the old owner may answer them only by forwarding (200 for an id the new owner
   has, 201 for one it has not) or with 503 + Retry-After; a 201 of its own copy shows up as
   a second 201 or as a message the cluster does not know;
   ``kill-nats``: SIGKILL the NATS server that leads the changelog stream (back next cycle);
   ``restart-node`` / ``restart-nats``: a clean stop (SIGTERM) and start of the next node or
   NATS server in turn: a rolling restart, one process at a time.
4. **Failover**: sends (ledger messages like any other) go to each topic the disruption hit
   until one is answered 201; the time from the disruption is the failover time, more than
   FAILOVER_LIMIT_S is a violation. The killed node is started again (it rejoins as a standby).
5. **Recover and check** exactly as the single-server loop does; a message due while its
   partition had no owner must be delivered within DUE_GRACE_MS of the failover's end.

The final phase stops the owner of a crash topic cleanly (SIGTERM: it hands its partitions
over), waits until no partition changed owner for a few leases, and runs the exact checks
through a front node; every live node's /readyz must report no pending timer.
"""

from __future__ import annotations

import concurrent.futures
import random
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

import httpx
from nats.errors import Error as NatsError

from tests.reliability.ledger import Msg, messages_path, now_ms
from tests.reliability.load import (
    TOPICS,
    Phase,
    Reply,
    call,
    guarded,
    http,
    send_items,
    send_one,
)
from tests.support.cluster import Cluster, Node
from tests.support.nats import CHANGELOG_STREAM, NatsServer, Owner, changelog, stream_peers
from tests.support.process import free_port
from tools.crash_loop import (
    LOG_MARKERS_SERVER,
    MIN_KILL_S,
    SERVER_ENV,
    STATUS_THREADS,
    Config,
    CrashLoop,
    RunFailed,
    Summary,
    store_open_problems,
)

KILL_OWNER = "kill-owner"
PAUSE_OWNER = "pause-owner"
KILL_NATS = "kill-nats"
RESTART_NODE = "restart-node"
RESTART_NATS = "restart-nats"
DISRUPTIONS = (KILL_OWNER, PAUSE_OWNER, KILL_NATS, RESTART_NODE, RESTART_NATS)
ROLLING = (RESTART_NODE,) * 3 + (RESTART_NATS,) * 3  # every node, then every NATS server

DEFAULT_LEASE_MS = 4_000  # ROCKTIMER_LEASE_MS's default (CLUSTER.md)
FAILOVER_LIMIT_S = 10.0  # the issue: the partition is writable again within 10 s
# A NATS server lost: JetStream elects new leaders for the streams it led (~5 s), and the
# owners' leases, renewed through the KV stream, may lapse meanwhile and move partitions.
NATS_FAILOVER_LIMIT_S = 20.0
FAILOVER_GIVE_UP_S = 45.0  # past this the run cannot go on
PROBE_TIMEOUT_S = 2.0  # one failover probe; a timeout leaves its send unanswered (resent later)
PROBE_PAUSE_S = 0.05
AFTER_S = 0.5  # the load goes on this long over the healed cluster
SETTLE_S = 45.0  # a restarted node ready and every partition owned
DUE_LEAD_S = 0.3  # the due-in-failover batch goes this long before the disruption
DUE_IN_FAILOVER = 40  # messages of that batch
STALE_SENDS = 12  # sends queued at a paused owner
STALE_TIMEOUT_S = 90.0  # they wait out the pause
PAUSE_PAST_LEASE_S = 1.0  # a pause lasts until the failover, and at least lease + this
STABLE_LEASES = 3  # before the final read, no owner changed for this many leases


@dataclass(frozen=True)
class ClusterConfig(Config):
    nodes: int = 3
    disruptions: tuple[str, ...] = (KILL_OWNER,)  # one per cycle, in turn
    lease_ms: int | None = None  # ROCKTIMER_LEASE_MS; None: the service's default
    sync_interval: str | None = None  # the NATS servers' JetStream sync_interval
    kills_per_cycle: int = 1  # kill-owner: owners killed one after the other under one load


class ClusterCrashLoop(CrashLoop):
    config: ClusterConfig

    def __init__(self, config: ClusterConfig, out: TextIO = sys.stdout) -> None:
        unknown = set(config.disruptions) - set(DISRUPTIONS)
        if unknown or not config.disruptions:
            raise ValueError(f"disruptions must be among {DISRUPTIONS}, got {config.disruptions}")
        super().__init__(config, out)
        env = dict(SERVER_ENV)
        if config.lease_ms is not None:
            env["ROCKTIMER_LEASE_MS"] = str(config.lease_ms)
        self.lease_s = (config.lease_ms or DEFAULT_LEASE_MS) / 1000
        self.cluster = Cluster(
            self.data_dir, config.nodes, sync_interval=config.sync_interval, env=env
        )
        self.front: Node = self.cluster.nodes[0]
        self.spawned: dict[str, float] = {}  # node id -> when it was started again
        self.nats_down: NatsServer | None = None
        self.rolled = {RESTART_NODE: 0, RESTART_NATS: 0}
        self.log_offsets: dict[str, int] = {}
        self.stale: list[threading.Thread] = []
        self.probes = 0  # probe sends so far: each has an msg_id of its own

    @property
    def url(self) -> str:
        return self.front.url

    # --- start, settle, stop -------------------------------------------------------------

    def start(self) -> None:
        """The first start: NATS servers, nodes, every partition owned."""
        began = time.monotonic()
        try:
            self.cluster.start()
        except RuntimeError as exc:
            raise RunFailed(f"the cluster did not start: {exc}") from None
        self.ready_s.append(time.monotonic() - began)
        self.check_logs()

    def spawn(self, node: Node) -> None:
        """Start ``node`` again on its data dir (a fresh port: another process may hold the
        last); it is waited for at the next settle."""
        node.port = free_port()
        node.spawn()
        self.spawned[node.node_id] = time.monotonic()

    def settle(self) -> None:
        """Nodes started again answer /readyz, a NATS server killed is back, and every
        partition has a live owner."""
        try:
            if self.nats_down is not None:
                self.nats_down.spawn()
                self.nats_down = None
                self.cluster.nats.wait_ready()
            self.settle_nodes()
            self.cluster.wait_owned(SETTLE_S)
        except RuntimeError as exc:
            raise RunFailed(f"the cluster did not settle: {exc}") from None
        self.check_logs()

    def wait_serving(self, count: int) -> None:
        """Until ``count`` live nodes answer /readyz (nodes started again may be joining)."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            for node_id, spawned in list(self.spawned.items()):
                node = self.cluster.node(node_id)
                try:
                    node.check_alive()
                except RuntimeError as exc:
                    raise RunFailed(str(exc)) from None
                if node.answers():
                    self.ready_s.append(time.monotonic() - spawned)
                    del self.spawned[node_id]
            serving = [n for n in self.cluster.live() if n.node_id not in self.spawned]
            if len(serving) >= count:
                return
            if time.monotonic() > deadline:
                raise RunFailed(f"fewer than {count} nodes serving for {SETTLE_S}s")
            time.sleep(0.05)

    def settle_nodes(self) -> None:
        """Nodes started again answer /readyz (the time from their start is recorded)."""
        for node_id, spawned in list(self.spawned.items()):
            try:
                self.cluster.wait_node(self.cluster.node(node_id), SETTLE_S)
            except RuntimeError as exc:
                raise RunFailed(f"{node_id} did not come back: {exc}") from None
            self.ready_s.append(time.monotonic() - spawned)
            del self.spawned[node_id]

    def shutdown(self) -> None:
        for t in self.stale:
            t.join(0)
        if self.ledger.errors:  # what the nodes said, while their logs are at hand
            for node in self.cluster.nodes:
                self.ledger.error(f"{node.node_id} log tail:\n{node.tail()[-1500:]}")
        self.cluster.kill()

    def restart_clean(self) -> None:
        """SIGTERM the owner of a crash topic's partition: a clean handover to another node
        (the rolling restart starts nodes again; here the final checks run without it)."""
        self.settle()
        owner = self.cluster.owner_of(TOPICS[0])
        self.choose_front(avoid=owner)
        self.stopped(owner.stop())
        self.wait_stable()

    def wait_stable(self) -> None:
        """Until no partition changed owner for STABLE_LEASES leases: nodes hand partitions
        back to a node that rejoined, and the final read must not meet a handover (a
        receive whose reply is lost leaves its messages invisible for the rest of the run)."""
        quiet_s = STABLE_LEASES * self.lease_s
        deadline = time.monotonic() + SETTLE_S + quiet_s
        last, since = self.cluster.owners(), time.monotonic()
        while time.monotonic() - since < quiet_s:
            if time.monotonic() > deadline:
                raise RunFailed(f"owners still moving after {SETTLE_S + quiet_s:.0f}s: {last}")
            time.sleep(0.2)
            now = self.cluster.owners()
            if {k: (o.node, o.epoch) for k, o in now.items()} != {
                k: (o.node, o.epoch) for k, o in last.items()
            } or len(now) < self.cluster.partitions:
                last, since = now, time.monotonic()

    def statuses(self, c: httpx.Client, msgs: Sequence[Msg]) -> list[tuple[Msg, Reply]]:
        """The base loop's GETs, patient: a partition between owners answers 503 for a
        while (a GET changes nothing, so asking again is always safe)."""
        deadline = time.monotonic() + SETTLE_S

        def get(m: Msg) -> tuple[Msg, Reply]:
            while True:
                r = call(c, "GET", messages_path(m.topic, m.msg_id))
                if r is not None:
                    return m, r
                if time.monotonic() > deadline:
                    raise RunFailed(f"GET {m.topic}/{m.msg_id}: no answer for {SETTLE_S}s")
                time.sleep(PROBE_PAUSE_S)

        with concurrent.futures.ThreadPoolExecutor(STATUS_THREADS) as pool:
            return list(pool.map(get, msgs))

    def recover(self) -> None:
        """The base loop's recovery, again while a partition is between owners: each pass
        resends only what is still unanswered, and a resend whose reply is lost is simply
        unanswered again (its next pass GETs it first, as the first did)."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            try:
                super().recover()
                return
            except RunFailed as exc:
                if time.monotonic() > deadline:
                    raise RunFailed(
                        f"{exc}: no answer through {self.front.node_id} for {SETTLE_S}s"
                    ) from None
                self.ledger.count("recovery_passes")
                time.sleep(PROBE_PAUSE_S)

    def stop_clean(self) -> None:
        """SIGTERM every live node at once (each drains on its own), each must exit cleanly."""
        with concurrent.futures.ThreadPoolExecutor(len(self.cluster.nodes)) as pool:
            for code in pool.map(lambda node: node.stop(), self.cluster.live()):
                self.stopped(code)

    def ready_urls(self) -> list[str]:
        return [n.url for n in self.cluster.live()]

    def check_logs(self) -> None:
        """Every node's RocksDB opens needed no repair, no node logged an error."""
        for node in self.cluster.nodes:
            for path in sorted(node.data_dir.glob("**/LOG")):
                try:
                    text = path.read_text(errors="replace")
                except FileNotFoundError:  # a standby copy dropped and rebuilt meanwhile
                    continue
                torn, problems = store_open_problems(text)
                self.ledger.count("torn_wal_tails", torn)
                for line in problems:
                    self.ledger.violate("store-open", "-", "-", f"RocksDB LOG ({path}): {line}")
            text = node.logs()
            offset = self.log_offsets.get(node.node_id, 0)
            new, self.log_offsets[node.node_id] = text[offset:], len(text)
            for marker in LOG_MARKERS_SERVER:
                if marker in new:
                    at = new.index(marker)
                    excerpt = new[max(0, at - 200) : at + 800]
                    self.ledger.violate(
                        "server-log", "-", "-", f"{node.node_id}: {marker.strip()}: {excerpt}"
                    )

    # --- one cycle -----------------------------------------------------------------------

    def choose_front(self, avoid: Node | None) -> None:
        fronts = [n for n in self.cluster.live() if n is not avoid and not n.paused]
        if not fronts:
            raise RunFailed("no live node to send through")
        self.front = self.rng.choice(fronts)

    def cycle(self, cycle: int) -> None:
        before = len(self.ledger.violations)
        sent = self.ledger.stats["messages"]
        self.settle()
        kind = self.config.disruptions[(cycle - 1) % len(self.config.disruptions)]
        victim, hit = self.victim(kind)
        self.choose_front(victim if isinstance(victim, Node) else None)
        kill_at = self.rng.uniform(MIN_KILL_S, self.config.load_s)
        self.kills_at_s.append(kill_at)
        self.ledger.prune(now_ms())
        kills = self.config.kills_per_cycle if kind == KILL_OWNER else 1
        give_up = kill_at + (FAILOVER_GIVE_UP_S + SETTLE_S) * kills
        phase = Phase(self.url, self.ledger, cycle, time.monotonic() + give_up)
        threads = self.start_workers(phase, kill_at)
        due_at = max(0.0, kill_at - DUE_LEAD_S)
        threads.append(guarded(self.ledger, self.due_batch, phase, hit[0], due_at))
        took: list[float] = []
        names = [victim.name]
        try:
            time.sleep(kill_at)
            took.append(self.disrupt(kind, victim, hit, cycle))
            for _ in range(1, kills):
                # the next owner, under the same load, once two nodes serve (the victim
                # before last is back): one survives the kill
                self.wait_serving(2)
                victim, hit = self.victim(kind, avoid=self.front)
                if victim is self.front:  # it owns both: the load's sends to it go unanswered
                    self.choose_front(victim)  # and the probes go through another node
                names.append(victim.name)
                took.append(self.disrupt(kind, victim, hit, cycle))
            time.sleep(AFTER_S)
        finally:
            phase.stop.set()
            self.join(threads)
        self.recover()
        self.check(final=False)
        s = self.ledger.stats
        new = self.ledger.violations[before:]
        self.say(
            f"cycle {cycle}/{self.config.cycles}: {kind} {', '.join(names)} from {kill_at:.2f}s, "
            f"writable again after {', '.join(f'{s:.2f}' for s in took)}s, "
            f"{s['messages'] - sent} new messages, "
            f"violations {len(new)}"
            + (f" (seed {self.config.seed}): {sorted({v.msg_id for v in new})[:20]}" if new else "")
        )

    def victim(self, kind: str, avoid: Node | None = None) -> tuple[Node | NatsServer, list[str]]:
        """Who the disruption hits, and the crash topics whose partitions it hits (an owner
        other than ``avoid`` when there is one)."""
        if kind in (KILL_OWNER, PAUSE_OWNER):
            topics = self.rng.sample(TOPICS, len(TOPICS))
            topic = next((t for t in topics if self.cluster.owner_of(t) is not avoid), topics[0])
            owner = self.cluster.owner_of(topic)
            k = self.cluster.partition
            return owner, [t for t in TOPICS if k(t) == k(topic)] + [
                t for t in TOPICS if k(t) != k(topic)
            ]
        if kind == RESTART_NODE:
            i = self.rolled[kind] % len(self.cluster.nodes)
            self.rolled[kind] += 1
            return self.cluster.nodes[i], list(TOPICS)
        servers = self.cluster.nats.servers
        if kind == RESTART_NATS:
            i = self.rolled[kind] % len(servers)
            self.rolled[kind] += 1
            return servers[i], list(TOPICS)
        try:  # KILL_NATS: the server leading the changelog, whose loss costs an election
            leader = stream_peers(self.cluster.nats.urls, CHANGELOG_STREAM)[1]
        except (NatsError, OSError):  # no changelog yet, or no answer: any server will do
            leader = None
        named = [s for s in servers if s.name == leader]
        return (named or [self.rng.choice(servers)])[0], list(TOPICS)

    def disrupt(self, kind: str, victim: Node | NatsServer, hit: list[str], cycle: int) -> float:
        """Do ``kind`` to ``victim`` under load; returns the seconds until every topic in
        ``hit`` took a send again."""
        began = time.monotonic()
        self.ledger.failover_began(now_ms())
        if kind == KILL_OWNER:
            assert isinstance(victim, Node)
            victim.kill()
            took = self.wait_writable(hit, began, cycle)
            self.spawn(victim)
        elif kind == PAUSE_OWNER:
            assert isinstance(victim, Node)
            took = self.pause(victim, hit, began, cycle)
        elif kind == KILL_NATS:
            assert isinstance(victim, NatsServer)
            victim.kill()
            self.nats_down = victim
            took = self.wait_writable(hit, began, cycle, NATS_FAILOVER_LIMIT_S)
        elif kind == RESTART_NODE:
            assert isinstance(victim, Node)
            self.stopped(victim.stop())
            took = self.wait_writable(hit, began, cycle)
            self.spawn(victim)
        else:
            assert isinstance(victim, NatsServer)
            victim.stop()
            victim.spawn()
            took = self.wait_writable(hit, began, cycle, NATS_FAILOVER_LIMIT_S)
            self.cluster.nats.wait_ready()
        self.failover_s.append(took)
        self.due_floor_ms = now_ms()
        self.ledger.failover_ended(self.due_floor_ms)
        return took

    def wait_writable(
        self, topics: Sequence[str], began: float, cycle: int, limit_s: float = FAILOVER_LIMIT_S
    ) -> float:
        """Send (ledger messages) to each topic through the front node until one is
        answered 201; the seconds since ``began``."""
        n = 0
        with httpx.Client(base_url=self.url, timeout=PROBE_TIMEOUT_S) as c:
            for topic in topics:
                while True:
                    self.probes += 1
                    msg_id = f"c{cycle:03d}.probe.{self.probes:05d}"
                    n += 1
                    m = self.ledger.new(
                        topic, msg_id, {"msg_id": msg_id, "body": f"{topic}/{msg_id}"}
                    )
                    if send_one(c, self.ledger, m) == 201:
                        break
                    if time.monotonic() - began > FAILOVER_GIVE_UP_S:
                        raise RunFailed(f"{topic} took no send for {FAILOVER_GIVE_UP_S}s")
                    time.sleep(PROBE_PAUSE_S)
        took = time.monotonic() - began
        self.ledger.count("failover_probes", n)
        if took > limit_s:
            self.ledger.violate(
                "slow-failover", "-", "-", f"{list(topics)} writable again after {took:.1f}s"
            )
        return took

    def due_batch(self, phase: Phase, topic: str, at_s: float) -> None:
        """Messages falling due while ``topic``'s partition is without an owner."""
        until = time.monotonic() + at_s
        while not phase.done() and time.monotonic() < until:
            time.sleep(0.01)
        if phase.done():
            return
        rng = random.Random(phase.cycle)
        now = now_ms()
        span_ms = int((DUE_LEAD_S + self.lease_s + 1.0) * 1000)
        items = []
        for i in range(DUE_IN_FAILOVER):
            msg_id = f"c{phase.cycle:03d}.due.{i:03d}"
            request = {
                "msg_id": msg_id,
                "body": f"{topic}/{msg_id}",
                "deliver_at_ms": now + rng.randrange(int(DUE_LEAD_S * 1000), span_ms),
            }
            items.append(self.ledger.new(topic, msg_id, request))
        with http(phase.url) as c:
            send_items(c, self.ledger, topic, items)
        self.ledger.count("due_in_failover", sum(m.accepted for m in items))

    def pause(self, victim: Node, hit: list[str], began: float, cycle: int) -> float:
        """SIGSTOP the owner, queue sends at it, let another node take over, send some of
        the queued ids to the new owner, SIGCONT; returns the failover time."""
        k = self.cluster.partition(hit[0])
        old = self.cluster.owners().get(k)
        victim.pause()
        queued: list[Msg] = []
        for i in range(STALE_SENDS):
            msg_id = f"c{cycle:03d}.stale.{i:03d}"
            queued.append(
                self.ledger.new(hit[0], msg_id, {"msg_id": msg_id, "body": f"{hit[0]}/{msg_id}"})
            )
        replies: list[str] = []
        for m in queued:
            t = threading.Thread(target=self.stale_send, args=(victim.url, m, replies), daemon=True)
            t.start()
            self.stale.append(t)
        took = self.wait_writable(hit, began, cycle)
        new = self.cluster.owners().get(k)
        if new is None or old is None or new.node == old.node or new.epoch <= old.epoch:
            self.ledger.violate("takeover", "-", "-", f"p{k} owned by {old}, then by {new}")
        with http(self.url) as c:
            for m in queued[::2]:  # the new owner takes these first: the old may not 201 them
                send_one(c, self.ledger, m)
        time.sleep(max(0.0, began + self.lease_s + PAUSE_PAST_LEASE_S - time.monotonic()))
        victim.resume()
        for t in self.stale:
            t.join(STALE_TIMEOUT_S)
            if t.is_alive():
                raise RunFailed(f"a send queued at the paused {victim.node_id} never came back")
        self.stale.clear()
        for kind in replies:
            self.ledger.count(f"paused_owner_{kind}")
        if old is not None and new is not None:
            time.sleep(AFTER_S)  # anything the old owner would still try, it has tried now
            self.check_fenced(k, old, new)
        return took

    def check_fenced(self, k: int, old: Owner, new: Owner) -> None:
        """No record of ``old``'s epoch follows the first record of ``new``'s epoch on
        partition ``k``'s changelog subject (each record names its node and epoch)."""
        try:
            records = changelog(self.cluster.nats.urls, k)
        except (NatsError, OSError) as exc:
            raise RunFailed(f"reading the changelog of p{k}: {exc!r}") from None
        if records and all(r.node is None for r in records):
            self.ledger.violate(
                "changelog-headers", "-", "-", f"p{k}: no record names its node and epoch"
            )
            return
        fence = next(
            (i for i, r in enumerate(records) if r.node == new.node and r.epoch == new.epoch), None
        )
        if fence is None:
            self.ledger.violate("no-fence", "-", "-", f"p{k}: no record of {new} on its subject")
            return
        self.ledger.count("records_after_fence", len(records) - fence - 1)
        for r in records[fence + 1 :]:
            if r.node == old.node and (r.epoch or 0) <= old.epoch:
                self.ledger.violate(
                    "stale-append",
                    "-",
                    "-",
                    f"p{k}: seq {r.seq} appended by the deposed {old.node} (epoch {r.epoch}) "
                    f"after {new.node}'s fence (epoch {new.epoch})",
                )

    def stale_send(self, url: str, m: Msg, replies: list[str]) -> None:
        """One send queued at the paused owner: its answer is recorded in the ledger (a 503
        as an unknown outcome), and its kind in ``replies``: a status, "503-no-retry-after"
        for a 503 that does not say when to come back, or "no-reply"."""
        with httpx.Client(base_url=url, timeout=STALE_TIMEOUT_S - 5) as c:
            try:
                r = c.post(messages_path(m.topic), json=m.request)
            except httpx.TransportError:
                self.ledger.on_send_lost(m)
                replies.append("no-reply")
                return
        if r.status_code == 503:
            self.ledger.on_send_lost(m)
            replies.append("503" if "retry-after" in r.headers else "503-no-retry-after")
            return
        self.ledger.on_send(m, r.status_code, r.json(), r.text[:300])
        replies.append(str(r.status_code))


def run(config: ClusterConfig, out: TextIO = sys.stdout) -> Summary:
    return ClusterCrashLoop(config, out).run()
