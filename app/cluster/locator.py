"""Where a partition is answered, for the router (app/cluster/router.py): by an app of this
process, by a relay to its owner (another worker's unix socket, or in cluster mode another
node over TCP), or by no one right now (503 + Retry-After).

A locator also says which partitions a request is answered for here: a request relayed
from another process is answered from this process's partitions only, and is never
relayed again.

``Workers`` is the one machine's: fixed owners (``k % workers``), relays over the workers'
unix sockets. The cluster's is app/cluster/node.py's ``Node``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import NamedTuple, Protocol

from starlette.types import Scope

from app.cluster.gather import Part
from app.cluster.layout import Layout
from app.cluster.relay import Relay
from app.front import Service


class Peer(NamedTuple):
    """Another process that answers for some partitions of a gathered request."""

    name: int | str | None  # a worker's index, a node's id; None: no one serves them now
    partitions: list[int]
    part: Part | None  # its answer; None when no one serves them now


class Locator(Protocol):
    partitions: int
    label: str  # what a process is called in /readyz and /metrics: "worker" or "node"

    @property
    def name(self) -> int | str:
        """This process's name: a worker's index, a node's id."""

    def local(self, scope: Scope) -> dict[int, Service] | None:
        """The partitions this process answers ``scope`` from, by their apps; None when it
        was asked for one it does not serve (then no part of it is answered)."""

    def owner(self, k: int, scope: Scope) -> Part | None:
        """Who answers partition ``k``, not served here: a relay to its owner; None if no
        owner is known or reachable, or ``scope`` was already relayed (503)."""

    def peers(self, scope: Scope) -> list[Peer]:
        """For a request answered by every partition: each other process serving some of
        them (each answers for those), and the partitions no one serves now; none for a
        request that was itself relayed."""

    def fallback(self, scope: Scope) -> Part | None:
        """Who answers a request that is no partition's (``/healthz``, the console …)."""

    def lifespan(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The partitions' apps start (their engines, their pushers) and stop with it."""


def internal(scope: Scope) -> bool:
    """Came in on a private unix socket (uvicorn gives a unix socket no port)."""
    server = scope.get("server")
    return server is not None and server[1] is None


class Workers:
    """One machine's workers: worker ``index`` has ``apps``, partition ``k`` is owned by
    worker ``k % workers`` and reached over its unix socket (``sockets[w]``)."""

    def __init__(
        self, layout: Layout, index: int, apps: dict[int, Service], sockets: Sequence[str]
    ) -> None:
        self.layout = layout
        self.partitions = layout.partitions
        self.label = "worker"
        self.name = index
        self.apps = apps
        self.first = apps[min(apps)]
        limit = self.first.limit
        self.relays = {w: Relay(sockets[w], limit) for w in range(layout.workers) if w != index}

    def local(self, scope: Scope) -> dict[int, Service]:
        return self.apps

    def owner(self, k: int, scope: Scope) -> Part | None:
        relay = self.relays.get(self.layout.owner(k))
        if relay is None or internal(scope):  # never relayed twice
            return None
        return relay.forward

    def peers(self, scope: Scope) -> list[Peer]:
        if internal(scope):
            return []
        return [Peer(w, self.layout.owned(w), r.forward) for w, r in self.relays.items()]

    def fallback(self, scope: Scope) -> Part:
        return self.first

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for app in self.apps.values():
                await stack.enter_async_context(app.router.lifespan_context(app))
            try:
                yield
            finally:
                for relay in self.relays.values():
                    relay.close()
