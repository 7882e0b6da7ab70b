"""Power-loss loop: the crash loop (tools/crash_loop.py) with the data dir on
the power-cut file system (tools/powercut), so that each crash also loses every write
the server did not fsync, as a power cut does. ``make powerloss CUTS=n`` runs it;
tests/reliability/test_powerloss.py runs a few cuts in ``make test``.

A SIGKILL leaves the page cache intact: a write the server never fsynced still reaches
the disk, so the crash loop cannot tell a correct fsync discipline from a missing one.
Here each crash is:

1. **SIGSTOP** the server and its children (the event log's sealer): from this instant
   no client gets an answer;
2. **freeze** the file system: from this instant nothing more reaches its disk (every
   operation fails), then **SIGKILL** the stopped processes;
3. **cut**: every write, create, rename and unlink not made durable by an fsync of the
   file or of its directory is dropped; one cut in TORN_CHANCE also writes back part of
   each open file's unsynced writes, the last one torn at a sector boundary;
4. **mount** what survived and restart the server on it (its real settings).

Everything else is the crash loop's: the load, the recovery as a client does it, every
check of the ledger, the final exact checks. On top, after the final clean stop, the
event log (the sealed Parquet segments and what the store still holds) is checked
against the ledger and the store (``check_event_log``): seqs 0..n-1 each exactly once (a
segment and its rename survive or are redone exactly once), one event of each kind per
message at most; every 201 has its ``scheduled`` event, every cancel answered 200 its
``cancelled``, every ack answered ``acked`` its ``acked``; and an event exists if and only
if its change is in the store: the messages with ``scheduled``, ``delivered`` and
``cancelled`` events are exactly those the store knows, delivered and cancelled.

The ledger changes one rule for power loss (Ledger.power_cut): a delivery a client only
read (a status, a receive) may have been in the unsynced tail of the WAL, so after a cut
that message may be scheduled again; one a durable reply reported (a send's, a cancel's
409) may not.

The last line printed is ``cuts=N violations=M seed=S``; a violation also prints the seed
and the msg_ids concerned (the crash loop's report).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from storage.records import MessageState, decode_index
from storage.store import CF, RocksStore
from tests.reliability.ledger import Cancel
from tests.reliability.test_events_crash import event_log
from tools.crash_loop import (
    LOAD_S,
    MIN_KILL_S,
    Config,
    CrashLoop,
    RunFailed,
    Summary,
)
from tools.powercut.mount import PowerCut, unavailable

DEFAULT_CUTS = 20

TORN_CHANCE = 0.3  # cuts that also tear the writeback under way

STATE_KINDS = {"delivered": MessageState.DELIVERED, "cancelled": MessageState.CANCELLED}


def children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc), deepest last."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        parents[int(entry)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        out += kids
        todo += kids
    return out


def signal_all(pids: Sequence[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


class PowerLoss(CrashLoop):
    def __init__(
        self, config: Config, work: Path, torn_chance: float, out: TextIO = sys.stdout
    ) -> None:
        self.work = work
        self.fs = PowerCut(work / "state", work / "mnt", work / "powercut.log")
        super().__init__(config, out)
        self.server.log_path = work / "server.log"  # off the mount: it must survive
        self.torn_chance = torn_chance
        self.cut_rng = random.Random(config.seed ^ 0x5EED)

    def start(self) -> None:
        if not self.fs.mounted:
            try:
                self.fs.mount()
            except RuntimeError as exc:
                raise RunFailed(str(exc)) from None
        super().start()

    def crash(self) -> None:
        """Stop the server and its children, freeze the disk (the instant of the cut),
        SIGKILL them, drop the unsynced."""
        proc = self.server.proc
        stopped: list[int] = []
        if proc is not None:
            signal_all([proc.pid], signal.SIGSTOP)  # it answers no client from now on
            stopped = [proc.pid, *children(proc.pid)]
            signal_all(stopped, signal.SIGSTOP)
        self.fs.freeze()
        signal_all(stopped, signal.SIGKILL)
        self.server.kill()  # reaps it
        torn = self.cut_rng.random() < self.torn_chance
        files = self.fs.cut(torn, self.cut_rng.getrandbits(32))
        self.ledger.count("cuts")
        self.ledger.count("torn_cuts", int(torn))
        self.ledger.count("torn_files", files)
        self.ledger.power_cut()

    def final(self) -> None:
        super().final()
        self.check_event_log()

    def check_event_log(self) -> None:
        """The event log against the ledger and the store (module docstring)."""
        ledger = self.ledger
        try:
            rows = event_log(self.data_dir)
            states = store_states(self.data_dir)
        except Exception as exc:
            raise RunFailed(f"cannot read the event log or the store: {exc!r}") from exc
        ledger.count("events", len(rows))
        seqs = Counter(r["seq"] for r in rows)
        wrong = [s for s in range(max(seqs, default=-1) + 1) if seqs[s] != 1]
        for s in wrong[:20]:
            ledger.violate("event-seq", "-", "-", f"seq {s} appears {seqs[s]} times")
        per_kind: dict[str, Counter[tuple[str, str]]] = {}
        acked: set[tuple[str, str, str]] = set()
        for r in rows:
            per_kind.setdefault(r["kind"], Counter())[(r["topic"], r["msg_id"])] += 1
            if r["kind"] == "acked":
                acked.add((r["group"], r["topic"], r["msg_id"]))
            if (r["topic"], r["msg_id"]) not in ledger.msgs:
                ledger.violate("event-never-sent", r["topic"], r["msg_id"], f"{r['kind']}")
        for kind in ("scheduled", "delivered", "cancelled"):
            for key, n in per_kind.get(kind, Counter()).items():
                if n > 1:
                    ledger.violate("event-twice", *key, f"{n} {kind} events")
        for m in ledger.all_messages():
            if m.creates and m.key not in per_kind.get("scheduled", ()):
                ledger.violate("event-missing", *m.key, "answered 201, no scheduled event")
            if m.cancel is Cancel.OK and m.key not in per_kind.get("cancelled", ()):
                ledger.violate("event-missing", *m.key, "cancel answered 200, no event")
        for group, key in ledger.acked:
            if (group, *key) not in acked:
                ledger.violate("event-missing", *key, f"ack answered in {group}, no event")
        known = set(states)
        with_events = set(per_kind.get("scheduled", ()))
        for key in sorted(known ^ with_events):
            where = "in the store, no scheduled event" if key in known else "event, no message"
            ledger.violate("event-store", *key, where)
        for kind, state in STATE_KINDS.items():
            evented = set(per_kind.get(kind, ()))
            stored = {k for k, s in states.items() if s is state}
            for key in sorted(evented ^ stored):
                ledger.violate("event-store", *key, f"{kind} event and store state disagree")
        hidden = [p for p in (self.data_dir / "events").rglob(".*") if p.is_file()]
        if hidden:
            ledger.violate("event-hidden", "-", "-", f"half-written segments left: {hidden}")


def store_states(data_dir: Path) -> dict[tuple[str, str], MessageState]:
    """Every message the store knows, (topic, msg_id) -> state (the server stopped)."""
    store = RocksStore(data_dir)
    try:
        found = store.scan(CF.MESSAGES, b"", b"\xff" * 9, 10**9)
    finally:
        store.close()
    out: dict[tuple[str, str], MessageState] = {}
    for key, value in found:
        topic, _, msg_id = key.partition(b"\x00")
        out[(topic.decode(), msg_id.decode())] = decode_index(value).state
    return out


def run(
    cuts: int,
    seed: int,
    *,
    load_s: float = LOAD_S,
    torn_chance: float = TORN_CHANCE,
    work: Path | None = None,
    keep: bool = False,
    out: TextIO = sys.stdout,
) -> Summary:
    """``cuts`` power cuts under load, then the final checks; the crash loop's summary."""
    reason = unavailable()
    if reason is not None:
        raise RuntimeError(f"the power-loss loop needs FUSE: {reason}")
    own = work is None
    work = work or Path(tempfile.mkdtemp(prefix="rocktimer-powerloss-"))
    config = Config(cycles=cuts, seed=seed, load_s=load_s, data_dir=work / "mnt" / "data")
    loop = PowerLoss(config, work, torn_chance, out)
    try:
        summary = loop.run()
    finally:
        loop.fs.unmount()
    stats = summary.stats
    print(
        f"  power cuts: {stats['cuts']} ({stats['torn_cuts']} torn, {stats['torn_files']} "
        f"files torn), {stats['deliveries_read_before_cut']} deliveries only read before a "
        f"cut (a cut may undo them), {stats['events']} events checked",
        file=out,
    )
    if summary.ok and own and not keep:
        shutil.rmtree(work, ignore_errors=True)
    elif not summary.ok:
        print(f"  work dir kept: {work}", file=out)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.powerloss",
        description="Cut the power under the real server; nothing acknowledged may be lost.",
    )
    parser.add_argument("--cuts", type=int, default=DEFAULT_CUTS)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    parser.add_argument("--load-s", type=float, default=LOAD_S, help="longest load per cut")
    parser.add_argument("--torn", type=float, default=TORN_CHANCE, help="share of torn cuts")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument("--keep", action="store_true", help="keep the work dir after a clean run")
    args = parser.parse_args(argv)
    if args.cuts < 1 or args.load_s <= MIN_KILL_S or not 0 <= args.torn <= 1:
        parser.error(f"--cuts must be >= 1, --load-s > {MIN_KILL_S}, --torn in [0, 1]")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"power-loss loop: seed={seed} cuts={args.cuts}", flush=True)
    started = time.monotonic()
    try:
        summary = run(
            args.cuts,
            seed,
            load_s=args.load_s,
            torn_chance=args.torn,
            work=args.work_dir,
            keep=args.keep,
        )
    except RuntimeError as exc:
        print(f"power-loss loop: {exc}", flush=True)
        print(f"cuts=0 violations=0 seed={seed}", flush=True)
        return 2
    print(summary.report(), flush=True)
    n = len(summary.violations) + len(summary.errors)
    print(f"  elapsed {time.monotonic() - started:.0f}s", flush=True)
    print(f"cuts={summary.stats['cuts']} violations={n} seed={seed}", flush=True)
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
