"""The cluster helpers give every NATS server and node its port before any of them binds
it: ``free_port`` must never hand the same port out twice in one test process."""

from __future__ import annotations

from tests.support.process import free_port


def test_free_port_never_hands_out_a_port_twice() -> None:
    # ~2,000 draws from the kernel's ~28k ephemeral ports repeat dozens of times by chance
    ports = [free_port() for _ in range(2_000)]
    assert len(set(ports)) == len(ports)
