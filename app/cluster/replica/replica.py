"""Replica: one partition's copy on this node, as a standby or as the owner.

Taking over (``take_over``): win the lease, catch the standby copy up to the subject's
last record, append a fence record expecting exactly that record (refused: someone
appended meanwhile, so catch up again), wait until the copy holds the fence, and hand the
copy to the engine with the Changelog its writer appends to. From the fence on, a former
owner's appends are refused (it expects an older last record), and past its lease
deadline it answers nothing anyway.

A copy an owner wrote to (marked: keys.OWNED_MARK_KEY) may hold commits the changelog
does not (the owner was killed between its local write and the record's ack, or
deposed): it is dropped and rebuilt from the stream before it serves as a standby.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable

from app.cluster.replica.bus import API_TIMEOUT_S, Bus
from app.cluster.replica.codec import Staged, fence_record
from app.cluster.replica.owner import (
    RETRY_S,
    Changelog,
    Lease,
    last_seq,
    owner_value,
    publish,
)
from app.cluster.replica.snapshot import SNAPSHOT_MIN_BYTES, SNAPSHOT_RECORDS, restore
from app.cluster.replica.standby import Standby
from storage import keys
from storage.keys import OWNED_MARK_KEY
from storage.store import CF, SECRET_BYTES, Put

log = logging.getLogger("rocktimer.cluster")

TAKE_OVER_S = 30.0  # default bound on catching up and fencing
CATCH_UP_LOG_S = 5.0  # a long catch-up says how far it got this often


class LeaseHeld(Exception):
    """Another node holds the partition's lease (its owner value, JSON)."""


class Replica:
    def __init__(
        self,
        bus: Bus,
        k: int,
        path: str,
        *,
        node_id: str,
        advertise: str,
        on_deposed: Callable[[int], None],
        memory_share: int = 1,
        snapshot_every: int = SNAPSHOT_RECORDS,
        snapshot_min_bytes: int = SNAPSHOT_MIN_BYTES,
    ) -> None:
        """``snapshot_every``, ``snapshot_min_bytes``: when a standby stores a snapshot
        (snapshot.py)."""
        self.bus = bus
        self.k = k
        self.path = path
        self.node_id = node_id
        self.advertise = advertise
        self.on_deposed = on_deposed
        self.memory_share = memory_share
        self.snapshot_every = snapshot_every
        self.snapshot_min_bytes = snapshot_min_bytes
        self.role = "idle"
        self.standby: Standby | None = None
        self.changelog: Changelog | None = None

    @property
    def serving(self) -> bool:
        """This node owns the partition and may answer for it right now: its lease is
        within its deadline and no append was refused. Check it before answering a read
        from the copy too (a paused owner resumed past its lease must not)."""
        changelog = self.changelog
        return changelog is not None and changelog.refusal() is None

    @property
    def applied_seq(self) -> int:
        return self.standby.applied if self.standby is not None else 0

    def follow(self) -> None:
        """Be the partition's standby (rebuilding the copy if an owner wrote to it)."""
        if self.standby is not None:
            return
        if _is_empty(self.path):
            restore(self.bus, self.k, self.path)
        standby = self._standby()
        if standby.owned_mark:
            standby.close()
            log.info("p%d: the local copy was an owner's: rebuilding it", self.k)
            shutil.rmtree(self.path)
            restore(self.bus, self.k, self.path)
            standby = self._standby()
        self.standby = standby
        self.role = "standby"

    def _standby(self) -> Standby:
        return Standby(
            self.bus,
            self.k,
            self.path,
            memory_share=self.memory_share,
            snapshot_every=self.snapshot_every,
            snapshot_min_bytes=self.snapshot_min_bytes,
        )

    def take_over(self, timeout_s: float = TAKE_OVER_S) -> Changelog:
        """Own the partition: lease, catch up, fence. The copy's store is closed when this
        returns: open the engine on ``path`` with the Changelog returned."""
        self.follow()
        standby = self.standby
        assert standby is not None
        give_up_at = time.monotonic() + timeout_s
        epoch = standby.epoch + 1  # known better once caught up (_fence)
        token = uuid.uuid4().hex
        value = owner_value(self.node_id, self.advertise, epoch, token)
        lease = self.bus.call(
            Lease.acquire(self.bus, self.k, value, timeout_s), timeout_s + API_TIMEOUT_S * 2
        )
        if lease is None:
            raise LeaseHeld(self._holder())
        try:
            fence_seq, epoch = self._fence(standby, lease, token, give_up_at)
            if not standby.wait_applied(fence_seq, max(0.0, give_up_at - time.monotonic())):
                raise TimeoutError(f"p{self.k}: the copy did not reach the fence in time")
            # Not through the changelog on purpose: this copy only, see the module's doc.
            standby.store.write([Put(CF.META, OWNED_MARK_KEY, b"1")], sync=True)
            standby.close()
        except BaseException:
            self.bus.call(lease.release(), API_TIMEOUT_S * 3)
            if standby.closed:  # the copy is marked as an owner's: rebuilt by the next follow
                self.standby = None
            raise
        self.standby = None
        self.changelog = Changelog(
            self.bus,
            self.k,
            lease,
            last_seq=fence_seq,
            node=self.node_id,
            epoch=epoch,
            on_deposed=self._deposed,
        )
        self.role = "owner"
        log.info(
            "p%d: owned by %s from changelog seq %d (epoch %d)",
            self.k,
            self.node_id,
            fence_seq,
            epoch,
        )
        return self.changelog

    def _fence(
        self, standby: Standby, lease: Lease, token: str, give_up_at: float
    ) -> tuple[int, int]:
        """Catch up and append the fence record; its seq and epoch (one more than the last
        fence's: the lease's value says so from its next renewal)."""
        attempt = 0
        started = time.monotonic()
        target = 0
        while True:
            if not lease.valid or time.monotonic() > give_up_at:
                raise TimeoutError(
                    f"p{self.k}: could not fence the changelog within "
                    f"{time.monotonic() - started:.1f} s: the copy holds up to seq "
                    f"{standby.applied} of {target}"
                    + ("" if lease.valid else f" (lease lost: {lease.lost or 'lapsed'})")
                )
            try:
                target = self.bus.call(last_seq(self.bus, self.k), API_TIMEOUT_S * 3)
            except Exception as exc:  # the stream's leader being elected: ask again
                log.warning("p%d: the changelog's last seq not answered (%s)", self.k, exc)
                time.sleep(RETRY_S)
                continue
            if not self._catch_up(standby, target, give_up_at):
                continue
            epoch = standby.epoch + 1
            lease.value = owner_value(self.node_id, self.advertise, epoch, token)
            writes: Staged = {}
            if not standby.has_secret:  # the partition's first owner: every copy gets it
                writes[CF.META] = {keys.RECEIPT_SECRET_KEY: os.urandom(SECRET_BYTES)}
            record = fence_record(self.node_id, epoch, [((), writes)] if writes else [])
            attempt += 1
            seq = self.bus.call(
                publish(
                    self.bus,
                    self.k,
                    record,
                    expected=target,
                    msg_id=f"fence-{self.node_id}-{lease.revision}-{attempt}",
                    writer=(self.node_id, epoch),
                    give_up=lambda: not lease.valid,
                ),
                max(1.0, give_up_at - time.monotonic()),
            )
            if seq is not None:
                return seq, epoch

    def _catch_up(self, standby: Standby, target: int, give_up_at: float) -> bool:
        """Wait until the copy holds ``target`` or ``give_up_at``; a line every
        CATCH_UP_LOG_S says how far it got meanwhile."""
        while True:
            left = give_up_at - time.monotonic()
            if standby.wait_applied(target, max(0.0, min(left, CATCH_UP_LOG_S))):
                return True
            if left <= CATCH_UP_LOG_S:
                return False
            log.info(
                "p%d: taking over: the copy holds up to seq %d of %d (%.0f s left)",
                self.k,
                standby.applied,
                target,
                give_up_at - time.monotonic(),
            )

    def _holder(self) -> str:
        async def get() -> str:
            try:
                entry = await self.bus.owners.get(f"p{self.k}")
            except Exception:
                return "{}"
            return (entry.value or b"{}").decode()

        return self.bus.call(get(), API_TIMEOUT_S * 3)

    def _deposed(self, k: int) -> None:
        self.role = "deposed"
        self.on_deposed(k)

    def demote(self) -> None:
        """After the engine on the copy stopped (deposed): drop the copy, follow again."""
        self.changelog = None
        if os.path.exists(self.path):
            shutil.rmtree(self.path)
        self.role = "idle"
        self.follow()

    def release(self) -> None:
        """A clean stop of the owner (its engine stopped): last acks, lease given up."""
        if self.changelog is not None:
            self.changelog.close()
            self.changelog = None
        self.role = "idle"

    def close(self) -> None:
        if self.standby is not None:
            self.standby.close()
            self.standby = None
        self.release()


def _is_empty(path: str) -> bool:
    return not os.path.isdir(path) or not os.listdir(path)
