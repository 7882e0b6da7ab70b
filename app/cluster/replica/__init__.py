"""Cluster mode's replication of a partition on NATS JetStream (see docs/cluster.md):
a changelog of its group commits, an owner's lease and fencing, standbys, take-over.

Imported only in cluster mode: nats-py is the optional ``cluster`` extra."""

from app.cluster.replica.bus import Bus, BusError
from app.cluster.replica.owner import Changelog
from app.cluster.replica.replica import LeaseHeld, Replica

__all__ = ["Bus", "BusError", "Changelog", "LeaseHeld", "Replica"]
