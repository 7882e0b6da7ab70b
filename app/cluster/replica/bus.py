"""Bus: this process's one connection to NATS JetStream, on an asyncio loop of its own.

nats-py is asyncio; the writer, the standbys' appliers and the node's own threads are
threads. One loop thread per process runs every NATS call; threads cross to it with
``call`` (wait for the result) or ``submit`` (a future). It creates (or binds to) the
changelog stream and the owners' KV bucket on start.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, ObjectStoreConfig, StorageType, StreamConfig
from nats.js.kv import KeyValue

log = logging.getLogger("rocktimer.cluster")

T = TypeVar("T")

STREAM = "ROCKTIMER_CHANGELOG"
SUBJECT_PREFIX = "rocktimer.changelog."
OWNERS_BUCKET = "rocktimer_owners"
SNAPSHOT_BUCKET = "rocktimer_snapshots"  # object store: a partition's latest snapshot
CONNECT_TIMEOUT_S = 2.0  # one server's TCP connect; every URL is tried
START_TIMEOUT_S = 30.0  # connect and create the stream and bucket (a fresh cluster elects first)
API_TIMEOUT_S = 2.0  # one JetStream request (publish ack, KV update, stream get)
RECONNECT_WAIT_S = 0.25  # between reconnect attempts: NATS servers restart in well under 1 s
SETUP_RETRY_S = 0.25  # between attempts of the setup while a fresh cluster elects leaders
MAX_RECORD_BYTES = 1024 * 1024  # NATS's default max_payload; smaller if the server says so


class BusError(Exception):
    """NATS cannot be reached or refuses to set up the changelog (one line for the log)."""


async def _connection_error(exc: Exception) -> None:
    """A NATS server going away is expected (a restart, a failover): the client reconnects
    to another; one line, not nats-py's default error with a traceback."""
    log.warning("NATS connection: %s", exc or type(exc).__name__)


async def _reconnected() -> None:
    log.warning("NATS reconnected")


def subject(k: int) -> str:
    return f"{SUBJECT_PREFIX}{k}"


class Bus:
    def __init__(self, urls: list[str], *, replicas: int, lease_ms: int) -> None:
        self.urls = urls
        self.replicas = replicas
        self.lease_ms = lease_ms
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="rocktimer-nats", daemon=True
        )
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._owners: KeyValue | None = None
        self._closing = False

    @classmethod
    def start(cls, urls: list[str], *, replicas: int, lease_ms: int) -> Bus:
        """Connected, with the stream and the owners' bucket in place; BusError if not."""
        bus = cls(urls, replicas=replicas, lease_ms=lease_ms)
        bus._thread.start()
        try:
            bus.call(
                bus._connect(), START_TIMEOUT_S + CONNECT_TIMEOUT_S * len(urls) + API_TIMEOUT_S
            )
        except Exception as exc:
            bus.close()
            raise BusError(f"cannot set up the changelog on NATS {','.join(urls)}: {exc}") from exc
        return bus

    @property
    def nc(self) -> Client:
        assert self._nc is not None, "Bus.start connects"
        return self._nc

    @property
    def js(self) -> JetStreamContext:
        assert self._js is not None, "Bus.start connects"
        return self._js

    @property
    def owners(self) -> KeyValue:
        assert self._owners is not None, "Bus.start connects"
        return self._owners

    @property
    def max_record_bytes(self) -> int:
        """The largest changelog record the servers take (less room for headers)."""
        return min(MAX_RECORD_BYTES, self.nc.max_payload) - 4096

    async def _connect(self) -> None:
        self._nc = await nats.connect(
            servers=self.urls,
            connect_timeout=CONNECT_TIMEOUT_S,
            reconnect_time_wait=RECONNECT_WAIT_S,
            max_reconnect_attempts=-1,  # forever: a server restart must not end the node
            allow_reconnect=True,
            name="rocktimer",
            error_cb=_connection_error,
            disconnected_cb=self._disconnected,
            reconnected_cb=_reconnected,
        )
        self._js = self._nc.jetstream(timeout=API_TIMEOUT_S)
        give_up_at = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                await self._set_up()
                return
            except Exception as exc:  # a fresh cluster electing its streams' leaders
                if time.monotonic() > give_up_at:
                    raise
                log.warning("changelog setup on NATS not answered yet (%s); retrying", exc)
                await asyncio.sleep(SETUP_RETRY_S)

    async def _set_up(self) -> None:
        """The changelog stream, the snapshots' object store and the owners' bucket: made
        if missing (several nodes may make them at once: the same config either way)."""
        assert self._js is not None
        config = StreamConfig(
            name=STREAM,
            subjects=[f"{SUBJECT_PREFIX}*"],
            storage=StorageType.FILE,
            num_replicas=self.replicas,
            allow_direct=True,
        )
        try:
            await self._js.stream_info(STREAM)
        except nats.js.errors.NotFoundError:
            try:
                await self._js.add_stream(config)
            except nats.js.errors.BadRequestError:  # another node created it meanwhile
                await self._js.stream_info(STREAM)
        try:
            await self._js.object_store(SNAPSHOT_BUCKET)
        except nats.js.errors.BucketNotFoundError:
            await self._js.create_object_store(
                SNAPSHOT_BUCKET, ObjectStoreConfig(replicas=self.replicas)
            )
        lease_s = self.lease_ms / 1000
        try:
            owners = await self._js.key_value(OWNERS_BUCKET)
        except nats.js.errors.BucketNotFoundError:
            owners = await self._js.create_key_value(
                KeyValueConfig(bucket=OWNERS_BUCKET, ttl=lease_s, replicas=self.replicas, history=1)
            )
        ttl = (await owners.status()).ttl
        if ttl and ttl * 1000 < self.lease_ms:
            # The bucket (made by the first node) expires leases sooner than this node's
            # setting: an owner must stop before the servers let another node take over.
            log.warning(
                "the owners' bucket expires leases after %.0f ms, not ROCKTIMER_LEASE_MS=%d: "
                "using %.0f ms",
                ttl * 1000,
                self.lease_ms,
                ttl * 1000,
            )
            self.lease_ms = int(ttl * 1000)
        self._owners = owners

    async def _disconnected(self) -> None:
        if not self._closing:
            log.warning("NATS disconnected: reconnecting")

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Run ``coro`` on the NATS loop and wait for it (at most ``timeout_s``)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        """Drain the connection and stop the loop thread."""
        self._closing = True
        if self._nc is not None and self._thread.is_alive():
            try:
                self.call(self._nc.close(), API_TIMEOUT_S * 2)
            except Exception as exc:  # closing a connection to servers that are gone
                log.debug("NATS close: %s", exc)
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()
