"""What every timer kind shares: the span being fired and the shape of a fire action."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from storage.errors import CorruptRecordError
from storage.txn import Txn

log = logging.getLogger("rocktimer.timers")


class Span:
    """A scanned, contiguous span of due timer keys being fired in one batch."""

    __slots__ = ("entries", "moved", "recheck", "txn")

    def __init__(self, txn: Txn, entries: Sequence[tuple[bytes, bytes]], recheck: bool) -> None:
        self.txn = txn
        self.entries = entries
        # False when no cancel or reschedule committed since the scan: every message
        # timer in the span is then still live, and the index need not be re-read.
        self.recheck = recheck
        self.moved = 0  # messages delivered


FireRun = Callable[[Span, int, int], None]
"""Fire ``span.entries[start:stop]``, a run of timers of one kind, in key order."""


def one_at_a_time(fire: Callable[[Txn, bytes, bytes], None]) -> FireRun:
    """A FireRun for a kind whose timers fire one by one; an undecodable key is logged and
    skipped, so one bad key never stalls every delivery behind it."""

    def run(span: Span, start: int, stop: int) -> None:
        for key, value in span.entries[start:stop]:
            try:
                fire(span.txn, key, value)
            except CorruptRecordError as exc:
                log.error("skipping an undecodable timer: %s", exc)

    return run
