"""Failover of a partition whose owner is a real process: SIGKILLed, or paused past its
lease (SIGSTOP) and resumed. The owner process (tests/cluster/replica_support.py) prints
each send it answered; the node that takes over must hold every one of them, and a paused
owner must not land one record after the new owner's fence."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from app.cluster.replica import Bus, Replica
from tests.cluster.replica_support import K, engine_config, has, take_over
from tests.support.nats import NatsCluster, changelog
from tests.support.process import ROOT
from tests.workers.support import stop_within, wait_until
from workers.engine import Engine

LEASE_MS = 1500
SENDING_S = 1.5  # the owner sends for this long before it is killed or paused
TAKE_OVER_S = 20.0
ENOUGH = 50  # answered sends before the owner is killed: the take-over must hold them all


class OwnerProcess:
    """The owner of partition 0 in a child process, its answered sends collected."""

    def __init__(self, urls: str, path: Path, node: str) -> None:
        self.node = node
        self.lines: list[str] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        self.log = path.parent / f"{node}.log"  # its stderr: what it logged, a traceback
        with self.log.open("wb") as log:
            self.proc = self._start(urls, path, node, log)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @staticmethod
    def _start(urls: str, path: Path, node: str, log: BinaryIO) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.cluster.replica_support",
                urls,
                str(path),
                node,
                str(LEASE_MS),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def answered(self) -> set[str]:
        return {line.split()[1] for line in list(self.lines) if line.startswith("ok ")}

    def refused(self) -> int:
        return sum(line.startswith("refused ") for line in list(self.lines))

    def wait_for(self, line: str, what: str) -> None:
        """Until the process printed ``line``; failing, the test shows its log's tail."""
        try:
            wait_until(lambda: line in self.lines, TAKE_OVER_S, what)
        except AssertionError as exc:
            tail = self.log.read_text(errors="replace").splitlines()[-40:]
            state = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
            raise AssertionError(
                f"{exc}; the owner is {state}; its log ends:\n" + "\n".join(tail)
            ) from None

    def owns(self) -> bool:
        return any(line.startswith("owner ") for line in self.lines)

    def said_all(self) -> None:
        """Once the process is gone: until every line it wrote is read (the pipe may still
        hold answers it printed just before it died)."""
        self.proc.wait(10)
        self._reader.join(10)
        assert not self._reader.is_alive(), "the owner's output was not read to its end"

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def lease_ms() -> int:
    return LEASE_MS


@pytest.fixture
def standby(bus: Bus, tmp_path: Path) -> Iterator[Replica]:
    replica = Replica(
        bus,
        K,
        str(tmp_path / "b" / "p0"),
        node_id="b",
        advertise="127.0.0.1:2",
        on_deposed=lambda k: None,
    )
    replica.follow()
    yield replica
    replica.close()


@pytest.fixture
def owner(nats_cluster: NatsCluster, tmp_path: Path) -> Iterator[OwnerProcess]:
    proc = OwnerProcess(nats_cluster.urls, tmp_path / "a" / "p0", "a")
    yield proc
    proc.kill()


def start_sending(owner: OwnerProcess) -> None:
    wait_until(owner.owns, TAKE_OVER_S, "the owner process to take the partition")
    wait_until(lambda: len(owner.answered()) >= 20, TAKE_OVER_S, "sends answered")
    time.sleep(SENDING_S)


def missing(engine: Engine, answered: set[str]) -> list[str]:
    return sorted(m for m in answered if not has(engine, m))


def open_engine(replica: Replica) -> Engine:
    changelog = take_over(replica, TAKE_OVER_S)
    engine = Engine(engine_config(replica.path), changelog=changelog)
    engine.start()
    return engine


def test_replica_owner_killed_loses_nothing_answered(owner: OwnerProcess, standby: Replica) -> None:
    start_sending(owner)
    # A loaded machine answers fewer sends in SENDING_S: kill once enough were answered.
    wait_until(lambda: len(owner.answered()) > ENOUGH, TAKE_OVER_S, f"{ENOUGH} sends answered")
    owner.signal(signal.SIGKILL)
    owner.said_all()
    answered = owner.answered()
    started = time.monotonic()
    engine = open_engine(standby)
    try:
        took = time.monotonic() - started
        assert len(answered) > ENOUGH
        assert missing(engine, answered) == []
        assert took < 10.0, f"take-over took {took:.1f} s"
    finally:
        stop_within(engine)


def test_replica_paused_owner_writes_nothing_after_the_fence(
    owner: OwnerProcess, standby: Replica, nats_cluster: NatsCluster
) -> None:
    start_sending(owner)
    owner.signal(signal.SIGSTOP)
    engine = open_engine(standby)  # waits out the paused owner's lease
    try:
        changelog_ = standby.changelog
        assert changelog_ is not None
        fence = changelog_.last
        owner.signal(signal.SIGCONT)
        # The resumed owner learns it was deposed; its producers keep trying meanwhile.
        owner.wait_for(f"deposed p{K}", "the old owner deposed")
        refused_before = owner.refused()
        wait_until(lambda: owner.refused() > refused_before, TAKE_OVER_S, "sends refused")
        answered = owner.answered()
        assert missing(engine, answered) == []  # every 201 it gave is in the new owner
        later = changelog(nats_cluster.urls, K, after_seq=fence)
        assert [r.seq for r in later if r.node == "a"] == []
    finally:
        stop_within(engine)
