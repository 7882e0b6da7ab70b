"""The cluster as one node sees it (app/cluster/node.py): which nodes are alive, who owns
each partition, and which node should own it or stand by for it.

Both come from JetStream KV buckets whose values are renewed while they hold: a node's
heartbeat in ``rocktimer_nodes`` (every lease/4), a partition's owner lease in
``rocktimer_owners`` (every lease/4, by its owner's changelog). The node reads both
buckets every POLL of the lease; a value whose revision has not changed for a whole
lease, as this node's monotonic clock measures it, is over — whether or not the servers
have expired it yet. Time is passed in (``now``, monotonic seconds), never read here.

Assignment is rendezvous hashing with bounded loads: for partition ``k`` the live nodes
in the order of ``sha1(f"{node}/{k}")``, largest first. No node is assigned more than
ceil(P / nodes) partitions (3 nodes own 2 of 6 each): an owner keeps what it owns up to
that, and the rest go, partitions 0, 1, … in turn, to the first node in their order
still below it — every node computes the same answer from the same buckets, and a
change of nodes moves only the partitions it must.
That node should own it; the first in order that does not own it stands by for it
(applies its changelog). A partition without an owner is taken
by the first in that order at once, by the i-th after i leases (if the ones before it
are gone without their heartbeat having lapsed yet). An owner hands a partition over to
the first in order once that node has been alive for HANDOVER_LEASES leases and its
standby copy is within HANDOVER_BEHIND records of the owner's changelog (each node's
heartbeat says how far its standby copies are: ``{"applied": {"<k>": seq}}``), so nodes
started one after another end up with their shares, one restarting gets its own back,
and a hand-over costs the partition only the take-over's fence, not a rebuild.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

HANDOVER_LEASES = 2  # a node is trusted to take partitions over after this long alive
HANDOVER_BEHIND = 100  # records a standby may lag its owner and still be handed the partition


@dataclass(slots=True)
class Seen:
    """A KV value as this node saw it: its revision, and since when (monotonic s)."""

    value: dict[str, Any]
    revision: int
    since: float  # this revision first seen
    first: float  # the key first seen (for a node: since when it has been alive)


def decode(raw: bytes | None) -> dict[str, Any] | None:
    """A KV value as a JSON object, or None for anything else (a stored value that is not
    one of ours is ignored, never a crash)."""
    try:
        value = json.loads(raw or b"")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def rank(node: str, k: int) -> bytes:
    return hashlib.sha1(f"{node}/{k}".encode()).digest()


def order(nodes: list[str], k: int) -> list[str]:
    """``nodes`` in partition ``k``'s rendezvous order."""
    return sorted(nodes, key=lambda n: rank(n, k), reverse=True)


def assignment(
    nodes: list[str], partitions: int, owners: dict[int, str] | None = None
) -> list[list[str]]:
    """For each partition, ``nodes`` in the order in which they should own it: first the
    one it is assigned to, then the rest in rendezvous order. Each node is assigned at
    most ceil(P / nodes): first the partitions it owns now (``owners``), in turn, up to
    that; then every other partition, in turn, to the first node in its order below it.
    So a node that joins takes its share from the others and nothing else moves."""
    cap = -(-partitions // max(1, len(nodes)))
    load = dict.fromkeys(nodes, 0)
    assigned: dict[int, str] = {}
    for k, owner in sorted((owners or {}).items()):
        if owner in load and load[owner] < cap:
            assigned[k] = owner
            load[owner] += 1
    ranked = []
    for k in range(partitions):
        each = order(nodes, k)
        first = assigned.get(k)
        if first is None:
            first = next(n for n in each if load[n] < cap)
            load[first] += 1
        ranked.append([first, *(n for n in each if n != first)])
    return ranked


class View:
    def __init__(self, me: str, lease_s: float, partitions: int) -> None:
        self.me = me
        self.lease_s = lease_s
        self.partitions = partitions
        self.nodes: dict[str, Seen] = {}
        self.owners: dict[int, Seen] = {}
        self.ownerless_since: dict[int, float] = {}
        self._key: tuple[tuple[str, ...], tuple[tuple[int, str], ...]] = ((), ())
        self.joined = float("inf")  # when this node first read the buckets
        self._ranked: list[list[str]] = []

    @staticmethod
    def _update(
        seen: dict[Any, Seen], found: dict[Any, tuple[int, dict[str, Any]]], now: float
    ) -> None:
        for key in [key for key in seen if key not in found]:
            del seen[key]
        for key, (revision, value) in found.items():
            before = seen.get(key)
            if before is None:
                seen[key] = Seen(value, revision, now, now)
            elif before.revision != revision:
                seen[key] = Seen(value, revision, now, before.first)

    def saw(
        self,
        nodes: dict[str, tuple[int, dict[str, Any]]],
        owners: dict[int, tuple[int, dict[str, Any]]],
        now: float,
    ) -> None:
        """One reading of both buckets: each key's revision and value (deleted keys absent)."""
        self.joined = min(self.joined, now)
        self._update(self.nodes, nodes, now)
        self._update(self.owners, owners, now)
        for k in range(self.partitions):
            if self.owner(k, now) is None:
                self.ownerless_since.setdefault(k, now)
            else:
                self.ownerless_since.pop(k, None)

    def _fresh(self, seen: Seen, now: float) -> bool:
        return now - seen.since < self.lease_s

    def live(self, now: float) -> list[str]:
        """The nodes alive (this one always: it is asking)."""
        alive = {n for n, s in self.nodes.items() if self._fresh(s, now)}
        return sorted(alive | {self.me})

    def owner(self, k: int, now: float) -> Seen | None:
        """Partition ``k``'s owner while its lease holds, else None."""
        seen = self.owners.get(k)
        if seen is None or not self._fresh(seen, now) or not seen.value.get("node"):
            return None
        return seen

    def owner_node(self, k: int, now: float) -> str | None:
        seen = self.owner(k, now)
        return None if seen is None else str(seen.value["node"])

    def advertise(self, k: int, now: float) -> str | None:
        """Where partition ``k``'s owner answers (another node's ``host:port``)."""
        seen = self.owner(k, now)
        found = None if seen is None else seen.value.get("advertise")
        return found if isinstance(found, str) and found else None

    def ranked(self, k: int, now: float) -> list[str]:
        """The live nodes in the order in which they should own ``k``."""
        live = self.live(now)
        owners = {}
        for j in range(self.partitions):
            node = self.owner_node(j, now)
            if node is not None:
                owners[j] = node
        key = (tuple(live), tuple(sorted(owners.items())))
        if key != self._key:
            self._key, self._ranked = key, assignment(live, self.partitions, owners)
        return self._ranked[k]

    def should_take(self, k: int, now: float) -> bool:
        """``k`` has no owner and this node's turn to take it has come."""
        if self.owner(k, now) is not None or now - self.joined < self.lease_s / 4:
            return False  # first, a heartbeat's time to hear of the nodes starting with it
        ranked = self.ranked(k, now)
        waited = now - self.ownerless_since.get(k, now)
        return waited >= ranked.index(self.me) * self.lease_s

    def should_hand_over(self, k: int, now: float, last_seq: int) -> str | None:
        """The node this one (``k``'s owner, its changelog at ``last_seq``) should hand
        ``k`` to, if any: the first in order, alive for HANDOVER_LEASES leases, its standby
        copy caught up."""
        first = self.ranked(k, now)[0]
        if first == self.me:
            return None
        seen = self.nodes.get(first)
        if seen is None or now - seen.first < HANDOVER_LEASES * self.lease_s:
            return None
        applied = seen.value.get("applied")
        at = applied.get(str(k)) if isinstance(applied, dict) else None
        if not isinstance(at, int) or at < last_seq - HANDOVER_BEHIND:
            return None
        return first

    def standby(self, k: int, now: float) -> str | None:
        """The node that should stand by for ``k``: the first in order not owning it."""
        owner = self.owner_node(k, now)
        for node in self.ranked(k, now):
            if node != owner:
                return node
        return None
