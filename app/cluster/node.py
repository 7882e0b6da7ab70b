"""A cluster node (``python -m app`` with ROCKTIMER_CLUSTER): one process that owns some of
the cluster's partitions, stands by for others, and answers any request for any partition.

At start it binds its HTTP port, connects to NATS (app/cluster/replica/'s Bus, on a loop
thread of its own), checks the cluster's number of partitions (``rocktimer_layout``, key
``partitions``: recorded by the first node; another ROCKTIMER_PARTITIONS is one line and
exit 2) and serves. Then, every POLL_LEASE of the lease, on the HTTP server's loop:

- its heartbeat: ``rocktimer_nodes`` key ``<node id>`` → ``{"advertise": "host:port"}``
  (put every lease/4; the bucket's TTL is the lease);
- it reads both buckets (the nodes, the owners) into its view (app/cluster/view.py) and
  moves each partition toward the role the view gives this node: owner (``take_over``,
  then an engine on the copy and create_app's app, whole), standby (``follow``), or none;
  an owner hands a partition to the node that ranks first for it once that one has been
  alive a while, and gives up one it was deposed from (its changelog refused an append or
  its lease ran out: ``on_deposed``) the moment it hears so.

Requests (app/cluster/router.py with this node as its locator): a partition this node
serves is answered by its app, another by relaying the request to its owner's advertised
address (app/cluster/relay.py, over TCP) with ``Rocktimer-Forwarded`` set; a relayed
request is never relayed again (503 + Retry-After if this node does not serve its
partition any longer). A partition whose owner is unknown, or whose lease has lapsed, is
503 + Retry-After. A relayed request whose owner loses its partition (its lease passed
on, or its node's heartbeat stopped) while the reply is awaited ends there: a 503 before
the reply began, the connection cut after (a long poll or stream sees it end).

Requests answered by every partition (listings, /metrics, /readyz, a group's dead
letters) are asked of each other owner node with ``Rocktimer-Partitions: 1,4``: the
partitions that node is to answer for, and it answers for exactly those (503 if it no
longer serves one), so a merge never misses a partition or counts one twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from starlette.types import Scope

from app.__main__ import (
    EXIT_BAD_SETTING,
    EXIT_CANNOT_START,
    EXIT_WORKER_DIED,
    Server,
    fail,
    listen,
    open_engine,
    resolve_layout,
    server_config,
    tune_gc,
)
from app.cluster.gather import Part
from app.cluster.layout import HASH, Layout, keep
from app.cluster.locator import Peer
from app.cluster.relay import Relay
from app.cluster.router import Router
from app.cluster.view import View, decode
from app.cluster.worker import partition_settings
from app.config import Settings
from app.front import Service
from app.limits import BodyLimit
from app.main import create_app

if TYPE_CHECKING:
    from nats.js import JetStreamContext
    from nats.js.kv import KeyValue

    from app.cluster.replica import Bus, Changelog, Replica
    from workers.engine import Engine

log = logging.getLogger("rocktimer.cluster")

DEFAULT_PARTITIONS = 6  # ROCKTIMER_PARTITIONS=0 in cluster mode: 3 nodes own 2 each
NODES_BUCKET = "rocktimer_nodes"
LAYOUT_BUCKET = "rocktimer_layout"
LAYOUT_KEY = "partitions"
FORWARDED = b"rocktimer-forwarded"  # set on a relayed request: the node it came through
PARTITIONS = b"rocktimer-partitions"  # on a gathered request: the partitions to answer for
POLL_LEASE = 8  # the buckets are read every lease/8
HEARTBEAT_POLLS = 2  # the heartbeat is put every other reading: every lease/4
SETUP_TIMEOUT_S = 30.0  # the layout record and the nodes' bucket, at start
SETUP_RETRY_S = 0.25
READ_TIMEOUT_S = 2.0  # one reading of both buckets
STOP_PARTITION_S = 30.0  # a partition's clean stop at shutdown (its engine, its lease)
TAKE_OVER_S = 30.0  # catching up and fencing a partition being taken over
RETRY_S = 1.0  # a change of role that failed (NATS unreachable) is tried again after this


# --- start: settings, NATS, the cluster's layout ----------------------------------------------


def advertised(settings: Settings, port: int) -> str:
    """Where the other nodes reach this one: ROCKTIMER_ADVERTISE, else host:port (the
    port bound, for ROCKTIMER_PORT=0); a wildcard host needs ROCKTIMER_ADVERTISE."""
    if settings.advertise:
        return settings.advertise
    if settings.host in ("0.0.0.0", "::", ""):
        fail(
            f"ROCKTIMER_HOST={settings.host} listens on every address: set ROCKTIMER_ADVERTISE "
            "to the host:port where the other nodes reach this one",
            EXIT_BAD_SETTING,
        )
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return f"{host}:{port}"


def check(settings: Settings) -> None:
    """What cluster mode needs of the settings, or one line and exit 2."""
    if not settings.node_id:
        fail(
            "ROCKTIMER_CLUSTER is set: set ROCKTIMER_NODE_ID to this node's name too "
            "(up to 64 of A-Z a-z 0-9 _ -, unique in the cluster)",
            EXIT_BAD_SETTING,
        )
    if settings.workers > 1:
        fail(
            f"ROCKTIMER_WORKERS={settings.workers}: a cluster node is one process (run more "
            "nodes instead); leave it unset",
            EXIT_BAD_SETTING,
        )


async def bucket(js: JetStreamContext, name: str, replicas: int, ttl_s: float | None) -> KeyValue:
    """The KV bucket ``name``, created if it is not there yet (by this node or another)."""
    import nats.js.errors
    from nats.js.api import KeyValueConfig

    try:
        return await js.key_value(name)
    except nats.js.errors.BucketNotFoundError:
        pass
    try:
        return await js.create_key_value(
            KeyValueConfig(bucket=name, ttl=ttl_s, replicas=replicas, history=1)
        )
    except nats.js.errors.BadRequestError:  # another node created it meanwhile
        return await js.key_value(name)


async def cluster_partitions(layout_kv: KeyValue, asked: int) -> int | str:
    """The cluster's P: recorded by the first node (``asked``, or DEFAULT_PARTITIONS for
    0); a message when ``asked`` is another number, or the record is not one of ours."""
    import nats.js.errors

    want = asked or DEFAULT_PARTITIONS
    value = orjson.dumps({"partitions": want, "hash": HASH})
    try:
        await layout_kv.create(LAYOUT_KEY, value)
        return want
    except nats.js.errors.KeyWrongLastSequenceError:
        entry = await layout_kv.get(LAYOUT_KEY)
    found = decode(entry.value)
    have = None if found is None else found.get("partitions")
    if found is None or found.get("hash") != HASH or not isinstance(have, int) or have < 1:
        return f"the cluster's record {LAYOUT_BUCKET} {LAYOUT_KEY} is not ours: {entry.value!r}"
    if asked and asked != have:
        return (
            f"the cluster has {have} partitions; ROCKTIMER_PARTITIONS={asked} cannot change "
            f"that (set it to {have} or leave it unset, or use another cluster)"
        )
    return have


def run(settings: Settings) -> None:
    check(settings)
    sock = listen(settings)
    advertise = advertised(settings, sock.getsockname()[1])
    from app.cluster.replica import Bus, BusError

    urls = settings.cluster.split(",")
    try:
        bus = Bus.start(urls, replicas=settings.replicas, lease_ms=settings.lease_ms)
    except BusError as exc:
        fail(str(exc), EXIT_CANNOT_START)
    try:
        lease_s = settings.lease_ms / 1000

        async def setup() -> tuple[int | str, KeyValue]:
            """The records, retried while a new bucket's stream elects its leader."""
            deadline = time.monotonic() + SETUP_TIMEOUT_S
            while True:
                try:
                    layout_kv = await bucket(bus.js, LAYOUT_BUCKET, settings.replicas, None)
                    nodes_kv = await bucket(bus.js, NODES_BUCKET, settings.replicas, lease_s)
                    return await cluster_partitions(layout_kv, settings.partitions), nodes_kv
                except Exception as exc:
                    if time.monotonic() > deadline:
                        raise
                    log.info("cluster records not ready yet: %s", str(exc) or type(exc).__name__)
                    await asyncio.sleep(SETUP_RETRY_S)

        try:
            partitions, nodes_kv = bus.call(setup(), SETUP_TIMEOUT_S + READ_TIMEOUT_S * 4)
        except Exception as exc:
            fail(f"cannot set up the cluster's records on NATS: {exc}", EXIT_CANNOT_START)
        if isinstance(partitions, str):
            fail(partitions, EXIT_BAD_SETTING)
        found, _ = resolve_layout(
            settings.model_copy(update={"partitions": partitions, "workers": 1})
        )
        keep(found)  # the node's data dir records the cluster's P
        node = Node(settings, found, bus, nodes_kv, advertise)
        router = Router(node, BodyLimit(settings.max_request_bytes))
        server = Server(server_config(router, settings), settings)
        node.server = server
        tune_gc()
        log.info(
            "node %s (%s): %d partitions, NATS %s",
            settings.node_id,
            advertise,
            partitions,
            settings.cluster,
        )
        server.run(sockets=[sock])
    finally:
        bus.close()
    if server.worker_died:
        raise SystemExit(EXIT_WORKER_DIED)


# --- the node --------------------------------------------------------------------------------


@dataclass
class Owned:
    """A partition this node serves: its app, its engine, its changelog."""

    app: Service
    engine: Engine
    changelog: Changelog
    stop: asyncio.Event
    running: asyncio.Task[None]

    def serving(self) -> bool:
        """Its changelog takes writes: not deposed, its lease deadline not passed."""
        return self.changelog.refusal() is None


@dataclass
class Slot:
    """One partition on this node: its copy (app/cluster/replica/'s Replica), its role here,
    and the change of role under way (one at a time)."""

    replica: Replica
    role: str = "idle"  # idle | standby | owner
    busy: asyncio.Task[None] | None = None
    deposed: bool = False
    retry_at: float = 0.0  # after a failed change, not before this (monotonic)
    owned: Owned | None = field(default=None)


class Node:
    """This node's partitions, and where every other partition is answered (the router's
    locator, app/cluster/locator.py)."""

    def __init__(
        self, settings: Settings, layout: Layout, bus: Bus, nodes_kv: KeyValue, advertise: str
    ) -> None:
        self.settings = settings
        self.layout = layout
        self.partitions = layout.partitions
        self.bus = bus
        self.nodes_kv = nodes_kv
        self.me = settings.node_id
        self.label = "node"
        self.name = self.me
        self.advertise = advertise
        self.lease_s = settings.lease_ms / 1000
        self.view = View(self.me, self.lease_s, layout.partitions)
        self.limit = BodyLimit(settings.max_request_bytes)
        self.server: Server | None = None
        self.slots: dict[int, Slot] = {}
        self.served: dict[int, Owned] = {}  # what requests are answered from here
        self.relays: dict[str, Relay] = {}  # by advertised address
        # Relayed requests waiting on an owner: done when it no longer is (app/cluster/relay.py).
        self.waiting: dict[tuple[int | None, str], asyncio.Future[None]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping = False

    # --- the locator -------------------------------------------------------------------------

    @staticmethod
    def forwarded(scope: Scope) -> bool:
        return any(name == FORWARDED for name, _ in scope["headers"])

    @staticmethod
    def asked_for(scope: Scope) -> list[int] | None:
        for name, value in scope["headers"]:
            if name == PARTITIONS:
                try:
                    return [int(k) for k in value.split(b",") if k]
                except ValueError:
                    return [-1]  # none of ours: refused
        return None

    def apps(self) -> dict[int, Service]:
        return {k: owned.app for k, owned in self.served.items() if owned.serving()}

    def local(self, scope: Scope) -> dict[int, Service] | None:
        apps = self.apps()
        asked = self.asked_for(scope) if self.forwarded(scope) else None
        if asked is None:
            return apps
        if any(k not in apps for k in asked):
            return None
        return {k: apps[k] for k in asked}

    def _relay(self, advertise: str) -> Relay:
        relay = self.relays.get(advertise)
        if relay is None:
            host, _, port = advertise.rpartition(":")
            relay = self.relays[advertise] = Relay((host.strip("[]"), int(port)), self.limit)
        return relay

    def _lost(self, k: int | None, node: str) -> asyncio.Future[None]:
        """Done when ``node`` no longer owns ``k`` (``None``: is no longer alive)."""
        future = self.waiting.get((k, node))
        if future is None or future.done():
            future = self.waiting[(k, node)] = asyncio.get_running_loop().create_future()
        return future

    def _hop(self, advertise: str, node: str, k: int | None, asked: str | None = None) -> Part:
        headers = [(FORWARDED, self.me.encode())]
        if asked is not None:
            headers.append((PARTITIONS, asked.encode()))
        forward = self._relay(advertise).forward
        return functools.partial(forward, headers=headers, lost=self._lost(k, node))

    def owner(self, k: int, scope: Scope) -> Part | None:
        if self.forwarded(scope):  # never relayed twice
            return None
        now = time.monotonic()
        node, advertise = self.view.owner_node(k, now), self.view.advertise(k, now)
        if node is None or node == self.me or advertise is None:
            return None
        return self._hop(advertise, node, k)

    def peers(self, scope: Scope) -> list[Peer]:
        if self.forwarded(scope):
            return []
        now = time.monotonic()
        here = self.apps()
        by_node: dict[str, list[int]] = {}
        where: dict[str, str] = {}
        nobody: list[int] = []
        for k in range(self.partitions):
            if k in here:
                continue
            node, advertise = self.view.owner_node(k, now), self.view.advertise(k, now)
            if node is None or node == self.me or advertise is None:
                nobody.append(k)  # no one serves it now: no merge without it
                continue
            by_node.setdefault(node, []).append(k)
            where[node] = advertise
        peers = [
            Peer(node, ks, self._hop(where[node], node, None, ",".join(map(str, ks))))
            for node, ks in sorted(by_node.items())
        ]
        return [*peers, Peer(None, nobody, None)] if nobody else peers

    def fallback(self, scope: Scope) -> Part | None:
        here = self.apps()
        if here:
            return here[min(here)]
        if self.forwarded(scope):
            return None
        now = time.monotonic()
        for k in range(self.partitions):
            node, advertise = self.view.owner_node(k, now), self.view.advertise(k, now)
            if node is not None and node != self.me and advertise is not None:
                return self._hop(advertise, node, None)
        return None

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """The node joins (its heartbeat, its partitions' copies) and runs its control
        loop; at the end it stops its partitions cleanly and leaves."""
        from app.cluster.replica import Replica

        self.loop = asyncio.get_running_loop()
        share = self.partitions
        for k in range(self.partitions):
            replica = Replica(
                self.bus,
                k,
                self.layout.partition_dir(k),
                node_id=self.me,
                advertise=self.advertise,
                on_deposed=self._on_deposed,
                memory_share=share,
            )
            self.slots[k] = Slot(replica)
        await self._heartbeat()
        control = asyncio.create_task(self._control(), name="rocktimer-node")
        try:
            yield
        finally:
            self.stopping = True
            control.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await control
            await self._leave()

    # --- the control loop --------------------------------------------------------------------

    async def _on_bus(self, coro: Awaitable[Any], timeout_s: float) -> Any:
        async def bounded() -> Any:
            return await asyncio.wait_for(coro, timeout_s)

        return await asyncio.wrap_future(self.bus.submit(bounded()))

    async def _heartbeat(self) -> None:
        """This node's heartbeat: where it answers, and how far its standby copies are."""
        applied = {
            str(k): slot.replica.applied_seq
            for k, slot in self.slots.items()
            if slot.role == "standby" and not slot.deposed
        }
        value = orjson.dumps({"advertise": self.advertise, "applied": applied})
        try:
            await self._on_bus(self.nodes_kv.put(self.me, value), READ_TIMEOUT_S)
        except Exception as exc:  # NATS away: the owners' leases decide what happens
            log.warning("heartbeat not sent: %s", str(exc) or type(exc).__name__)

    async def _read(self) -> tuple[dict[str, tuple[int, dict[str, Any]]], dict[int, Any]]:
        """Both buckets as they are now (on the bus's loop)."""
        import nats.js.errors

        owners_kv, nodes_kv = self.bus.owners, self.nodes_kv

        async def one(kv: KeyValue, key: str) -> tuple[int, dict[str, Any]] | None:
            try:
                entry = await kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                return None
            value = decode(entry.value)
            return None if value is None or entry.revision is None else (entry.revision, value)

        async def read() -> tuple[dict[str, Any], dict[int, Any]]:
            stream = f"KV_{NODES_BUCKET}"
            prefix = f"$KV.{NODES_BUCKET}."
            info = await self.bus.js.stream_info(stream, subjects_filter=f"{prefix}>")
            names = [s[len(prefix) :] for s in (info.state.subjects or {})]
            found = await asyncio.gather(
                *(one(nodes_kv, n) for n in names),
                *(one(owners_kv, f"p{k}") for k in range(self.partitions)),
            )
            nodes = {n: f for n, f in zip(names, found[: len(names)], strict=True) if f}
            owners = {k: f for k, f in enumerate(found[len(names) :]) if f}
            return nodes, owners

        result: tuple[dict[str, Any], dict[int, Any]] = await self._on_bus(read(), READ_TIMEOUT_S)
        return result

    async def _control(self) -> None:
        """Every lease/8: the heartbeat (every other time), a reading of the buckets, the
        partitions steered. Unreadable buckets (NATS away) steer nothing; the leases seen
        still run out on this node's clock. A failure of the loop itself stops the node."""
        tick = 0
        period = self.lease_s / POLL_LEASE
        try:
            while True:
                if tick % HEARTBEAT_POLLS == 0 and tick:
                    await self._heartbeat()
                tick += 1
                try:
                    nodes, owners = await self._read()
                except Exception as exc:
                    why = str(exc) or type(exc).__name__
                    log.warning("cannot read the cluster's state: %s", why)
                    self._release_waiting(time.monotonic())
                else:
                    now = time.monotonic()
                    self.view.saw(nodes, owners, now)
                    self._release_waiting(now)
                    self._steer(now)
                await asyncio.sleep(period)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.critical("the node's control loop failed; the node stops", exc_info=True)
            self._die()

    def _release_waiting(self, now: float) -> None:
        """Relayed requests to an owner that no longer is one stop waiting for it."""
        live = set(self.view.live(now))
        for (k, node), future in list(self.waiting.items()):
            gone = node not in live if k is None else self.view.owner_node(k, now) != node
            if gone or future.done():
                if not future.done():
                    future.set_result(None)
                del self.waiting[(k, node)]

    def _steer(self, now: float) -> None:
        """Each partition toward its role here, one change at a time."""
        if self.stopping:
            return
        for k, slot in self.slots.items():
            if (slot.busy is not None and not slot.busy.done()) or now < slot.retry_at:
                continue
            change = self._change(k, slot, now)
            if change is not None:
                slot.busy = asyncio.create_task(self._guarded(k, change))

    def _change(self, k: int, slot: Slot, now: float) -> Callable[[], Awaitable[None]] | None:
        if slot.deposed:
            return functools.partial(self._demote, k)
        if slot.role == "owner":
            if slot.owned is not None and self._successor(k, slot.owned, now) is not None:
                return functools.partial(self._hand_over, k)
            return None
        if self.view.should_take(k, now) or self.view.owner_node(k, now) == self.me:
            return functools.partial(self._take, k)
        if self.view.standby(k, now) == self.me:
            return None if slot.role == "standby" else functools.partial(self._follow, k)
        return None if slot.role == "idle" else functools.partial(self._unfollow, k)

    async def _guarded(self, k: int, change: Callable[[], Awaitable[None]]) -> None:
        try:
            await change()
        except asyncio.CancelledError:
            raise
        except SystemExit:  # open_engine's one line: this node cannot open its own copy
            log.critical("p%d: the engine did not open; the node stops", k)
            self._die()
        except Exception as exc:  # NATS away (a server restarting): tried again shortly
            log.warning(
                "p%d: %s failed (tried again in %.1f s): %s",
                k,
                getattr(change, "func", change).__name__.strip("_"),
                RETRY_S,
                str(exc) or type(exc).__name__,
            )
            self.slots[k].retry_at = time.monotonic() + RETRY_S

    def _die(self) -> None:
        """A failure this node cannot mend: it stops (exit 3) for its supervisor to start
        it again, and its partitions pass to the others meanwhile."""
        if self.server is not None:
            self.server.worker_died = True
            self.server.should_exit = True

    # --- changes of role ---------------------------------------------------------------------

    async def _follow(self, k: int) -> None:
        slot = self.slots[k]
        await asyncio.to_thread(slot.replica.follow)
        slot.role = "standby"

    async def _unfollow(self, k: int) -> None:
        slot = self.slots[k]
        await asyncio.to_thread(slot.replica.close)
        slot.role = "idle"

    async def _take(self, k: int) -> None:
        from app.cluster.replica import LeaseHeld

        slot = self.slots[k]
        try:
            changelog = await asyncio.to_thread(slot.replica.take_over, TAKE_OVER_S)
        except LeaseHeld as held:
            log.debug("p%d: lease held: %s", k, held)
            slot.role = "standby"
            return
        except TimeoutError as exc:
            log.warning("p%d: not taken over: %s", k, exc)
            slot.role = "standby"
            return
        slot.role = "owner"
        try:
            slot.owned = await self._serve(k, changelog)
        except BaseException:  # the lease is given up: another node takes it meanwhile
            await asyncio.to_thread(slot.replica.release)
            slot.role = "idle"
            raise
        if self.server is not None:
            self.server.engines.append(slot.owned.engine)
        if slot.deposed:  # while it was starting
            return
        self.served[k] = slot.owned
        log.info("p%d: served here", k)

    async def _serve(self, k: int, changelog: Changelog) -> Owned:
        """``k``'s engine opened on the copy just taken over, its app started."""
        part = partition_settings(self.settings, self.layout, k)
        config = dataclasses.replace(part.engine, partition=k)  # in its sealed events
        engine = await asyncio.to_thread(open_engine, part, config, self.partitions, changelog)
        app = create_app(part, engine=engine)
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        running = asyncio.create_task(self._run_app(k, app, started, stop))
        await started
        return Owned(app, engine, changelog, stop, running)

    async def _run_app(
        self, k: int, app: Service, started: asyncio.Future[None], stop: asyncio.Event
    ) -> None:
        """The app's lifespan: its engine and pusher start, run until ``stop``, stop."""
        try:
            async with app.router.lifespan_context(app):
                started.set_result(None)
                await stop.wait()
        except Exception as exc:
            if not started.done():
                started.set_exception(exc)
            else:
                log.exception("p%d: the app's stop failed", k)

    async def _stop_app(self, k: int) -> None:
        """No request reaches ``k``'s app any longer; its engine stops."""
        slot = self.slots[k]
        self.served.pop(k, None)
        owned, slot.owned = slot.owned, None
        if owned is None:
            return
        owned.stop.set()
        await owned.running
        if self.server is not None and owned.engine in self.server.engines:
            self.server.engines.remove(owned.engine)

    def _successor(self, k: int, owned: Owned, now: float) -> str | None:
        return self.view.should_hand_over(k, now, owned.changelog.last)

    async def _hand_over(self, k: int) -> None:
        owned = self.slots[k].owned
        to = None if owned is None else self._successor(k, owned, time.monotonic())
        log.info("p%d: handed over to %s", k, to)
        await self._stop_app(k)
        slot = self.slots[k]
        await asyncio.to_thread(slot.replica.release)
        slot.role = "idle"

    def _on_deposed(self, k: int) -> None:
        """From the NATS loop: ``k``'s changelog refuses writes (its writer answers 503 from
        now on); this node stops serving it and rebuilds its copy as a standby."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._deposed, k)

    def _deposed(self, k: int) -> None:
        log.warning("p%d: deposed: another node owns it now", k)
        self.served.pop(k, None)
        self.slots[k].deposed = True
        self._steer(time.monotonic())

    async def _demote(self, k: int) -> None:
        slot = self.slots[k]
        await self._stop_app(k)
        await asyncio.to_thread(slot.replica.demote)
        slot.deposed = False
        slot.role = "standby"

    async def _leave(self) -> None:
        """The heartbeat deleted first (the others assign without this node), then every
        partition stopped cleanly (an owner gives its lease up): the others take over
        without waiting for a lease to lapse."""
        with contextlib.suppress(Exception):
            await self._on_bus(self.nodes_kv.delete(self.me), READ_TIMEOUT_S)
        for slot in self.slots.values():
            if slot.busy is not None and not slot.busy.done():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(slot.busy), STOP_PARTITION_S)
        for k, slot in self.slots.items():
            try:
                await self._stop_app(k)
                await asyncio.to_thread(slot.replica.close)
            except Exception:
                log.exception("p%d: not stopped cleanly", k)
        for relay in self.relays.values():
            relay.close()
