"""The floor of a delivery round: what the store and the threads cost on this machine,
with no Python around them (``python -m bench.deliver --floor``).

A round of figure 18's workload (``k`` timers falling due together, delivered to a
consumer that acks them) must at least write what its move writes, write what its ack
writes, fsync the WAL once before the ack is answered, and hand work between threads (the
move's reply to the event loop, the ack's batch to the syncer, the syncer's reply back).
This bench captures the exact keys and values of one round's two batches from a real
engine (a long poll served by the move, then acked, as ``--in-process`` does), then on a
fresh store of the same options times, alternating in every repetition:

- the move's WriteBatch, then the ack's, then ``flush_wal(True)``: today's structure
  (two commits and one fsync a round);
- both as one WriteBatch, then ``flush_wal(True)``: one commit and one fsync a round;

and, apart: ``flush_wal(True)`` after the round's batches on a store whose WAL is appended
to (a fresh store's) beside one whose WAL is a file RocksDB recycled (``roll_wal``: written
over in place, no file size to commit), alternating; a plain ``fdatasync`` of an append
and of an overwrite in place, for reference; one thread hand-off (a
``threading.Condition`` wake-up each way, the way the writer hands a batch to its syncer).
Each part's CPU is the calling thread's own (``time.thread_time``); fsync's wall time is
shown beside its CPU, but only the CPU counts toward CPU a message. The same process
makes batch sends of 1000 through an engine between the repetitions: the baseline of the
goal (CPU a message delivered and acked <= 3 x a batch send's).
"""

from __future__ import annotations

import copy
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from bench import batch
from bench.client import run
from storage.store import CF, DeleteRange, Put, RocksStore
from workers.scanner import Chunk

# A round's handoffs between threads: the move's reply to the event loop, the ack's batch
# to the syncer, the syncer's reply to the event loop (the same with one commit a round).
HANDOFFS_A_ROUND = 3
FLOOR_REPS = 2_000  # repetitions of each part (a round of each structure)
HANDOFF_REPS = 2_000  # round trips between two threads
SEND_EVERY = 100  # repetitions a batch send of 1000 (the baseline) is made
FLOOR_SIZES = (10, 2)  # timers a round: figure 18's (5,000/s, a move every 2 ms), the profile's

Staged = dict[str, dict[bytes, bytes | None]]


@dataclass(slots=True)
class Written:
    """One batch's ``write_staged`` arguments."""

    ranges: list[DeleteRange]
    staged: Staged

    @property
    def keys(self) -> int:
        return len(self.ranges) + sum(len(values) for values in self.staged.values())

    def merged(self, other: Written) -> Written:
        """Both batches as one: the later one's value of a key wins, as in a Txn."""
        staged: Staged = {cf: dict(values) for cf, values in self.staged.items()}
        for cf, values in other.staged.items():
            staged.setdefault(cf, {}).update(values)
        return Written([*self.ranges, *other.ranges], staged)


@dataclass(slots=True)
class Floor:
    """CPU µs of each part (medians over the repetitions) for rounds of ``size``."""

    size: int
    move_keys: int
    ack_keys: int
    move_us: float
    ack_us: float
    both_us: float
    fsync_us: float  # CPU of flush_wal(True)
    fsync_wall_us: float
    handoff_us: float
    append_sync: tuple[float, float]  # fdatasync after an append: CPU, wall µs
    overwrite_sync: tuple[float, float]  # after an overwrite in place
    wal_appended_us: float  # flush_wal(True) CPU after a round's batches, WAL appended
    wal_recycled_us: float  # the same, the WAL a recycled file
    send_us: float  # a batch send's CPU a message, same process

    @property
    def two_commits(self) -> float:
        """A round today: two commits, one fsync, the hand-offs."""
        return self.move_us + self.ack_us + self.fsync_us + HANDOFFS_A_ROUND * self.handoff_us

    @property
    def one_commit(self) -> float:
        """A round with the ack in the move's batch: one commit, one fsync, the hand-offs."""
        return self.both_us + self.fsync_us + HANDOFFS_A_ROUND * self.handoff_us

    @property
    def one_commit_recycled(self) -> float:
        """As ``one_commit``, the fsync that of a recycled WAL (the part it saves, as
        measured beside an appended one, taken off)."""
        return self.one_commit - max(0.0, self.wal_appended_us - self.wal_recycled_us)


async def _capture(data_dir: str, size: int) -> tuple[Written, Written]:
    """The move's and the ack's batches of one delivery round of ``size`` timers."""
    from bench.deliver import _Deliveries  # one home for the in-process round

    rounds = _Deliveries(data_dir, size)
    try:
        await rounds.load(4)
        await rounds.round()  # the first writes of a group (its settings, counters)
        writes: list[tuple[str, Written]] = []
        store = rounds.engine.store
        phase = ["park"]
        real_write = store.write_staged

        def record(ranges: Sequence[DeleteRange], staged: Staged, *, sync: bool) -> None:
            writes.append((phase[0], Written(list(ranges), copy.deepcopy(staged))))
            real_write(ranges, staged, sync=sync)

        move_here, ack = rounds.engine.deliverer.move_here, rounds.engine.ack

        def moving(batch: Chunk, stopping: Callable[[], bool]) -> bool:
            phase[0] = "move"
            return move_here(batch, stopping)

        async def acking(topic: str, group: str, receipts: list[str]) -> list[str]:
            phase[0] = "ack"
            return await ack(topic, group, receipts)

        store.write_staged = record  # type: ignore[method-assign]
        rounds.engine.deliverer.move_here = moving  # type: ignore[method-assign]
        rounds.engine.ack = acking  # type: ignore[method-assign]
        await rounds.round()
    finally:
        rounds.close()
    by_phase = {name: [w for p, w in writes if p == name] for name in ("move", "ack")}
    if [len(w) for w in by_phase.values()] != [1, 1]:
        raise RuntimeError(f"expected one move batch and one ack batch, got {writes!r}")
    return by_phase["move"][0], by_phase["ack"][0]


def _fdatasync_us(path: str, reps: int, *, append: bool) -> tuple[float, float]:
    """CPU and wall µs (medians) of ``os.fdatasync`` after writing a WAL record's worth of
    bytes: appended (the file grows, so its inode is committed too, as a WAL's append is),
    or over the same bytes in place (what a recycled WAL file would do)."""
    record = b"x" * 2048
    cpu, wall = [], []
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, record)
        os.fdatasync(fd)
        for _ in range(reps):
            if append:
                os.write(fd, record)
            else:
                os.pwrite(fd, record, 0)
            started, started_wall = time.thread_time(), time.perf_counter()
            os.fdatasync(fd)
            cpu.append(time.thread_time() - started)
            wall.append(time.perf_counter() - started_wall)
    finally:
        os.close(fd)
    return statistics.median(cpu) * 1e6, statistics.median(wall) * 1e6


ROLLED_WAL_BYTES = 48 * 1024 * 1024  # the WAL file a rolled engine's store writes over


def roll_wal(store: RocksStore) -> None:
    """Make the store's live WAL a file RocksDB recycled, of ROLLED_WAL_BYTES, as a server
    that has run for a while has (storage/store.py, RECYCLED_WALS): write that much, flush
    every memtable (the WAL is then obsolete and kept), and once more (the next WAL is the
    kept one). What it writes is deleted again."""
    value = b"r" * 4096
    low, high = b"\xff" * 8, b"\xff" * 9
    for n in (ROLLED_WAL_BYTES // len(value), 1):
        for i in range(0, n, 256):
            keys_ = [low + j.to_bytes(4, "big") for j in range(i, min(n, i + 256))]
            store.write([Put(CF.TIMERS, key, value) for key in keys_], sync=False)
        store.write([DeleteRange(CF.TIMERS, low, high)], sync=False)
        for cf in CF.ALL:
            store.compact(cf, None, None)


def _wal_fsync_us(tmp: str, written: Written, reps: int) -> tuple[float, float]:
    """CPU µs (medians) of flush_wal(True) after writing ``written``, on a store whose WAL
    is appended to (a fresh one's) and on one whose WAL is a recycled file (roll_wal); in
    alternation."""
    appended, recycled = RocksStore(f"{tmp}/wal-appended"), RocksStore(f"{tmp}/wal-recycled")
    stores = [appended, recycled]
    spent: list[list[float]] = [[], []]
    try:
        roll_wal(recycled)
        for r in range(reps):
            for i in (0, 1) if r % 2 == 0 else (1, 0):
                _write(stores[i], written)
                spent[i].append(_timed(stores[i].sync_wal))
    finally:
        for store in stores:
            store.close()
    return statistics.median(spent[0]) * 1e6, statistics.median(spent[1]) * 1e6


def _timed(fn: Callable[[], object]) -> float:
    started = time.thread_time()
    fn()
    return time.thread_time() - started


def _handoff_us(reps: int) -> float:
    """CPU of one hand-off between two threads (Condition wake-ups, as the writer hands a
    batch to its syncer): the process's CPU over ``reps`` round trips, ÷ 2 reps."""
    cond = threading.Condition()
    turn = [0]

    def echo() -> None:
        with cond:
            for i in range(reps):
                while turn[0] != 2 * i + 1:
                    cond.wait()
                turn[0] += 1
                cond.notify()

    thread = threading.Thread(target=echo, name="floor-echo", daemon=True)
    thread.start()
    started = time.process_time()
    with cond:
        for i in range(reps):
            turn[0] = 2 * i + 1
            cond.notify()
            while turn[0] != 2 * i + 2:
                cond.wait()
    spent = time.process_time() - started
    thread.join()
    return spent / (2 * reps) * 1e6


class _Sender:
    """Batch sends of 1000 one-hour timers through an engine, and their process CPU."""

    def __init__(self, data_dir: str) -> None:
        from bench.deliver import _Deliveries

        self.engine = _Deliveries(data_dir, 1)
        self.cpu_s = 0.0
        self.sent = 0

    async def send(self) -> None:
        from bench.deliver import _in_process_record

        due = self.engine.clock.now_ms() + batch.DELAY_MS
        recs = [_in_process_record(f"b{self.sent}-{i}", due) for i in range(1000)]
        started = time.process_time()
        await self.engine.engine.send_batch(recs)
        self.cpu_s += time.process_time() - started
        self.sent += len(recs)

    @property
    def us_per_msg(self) -> float:
        return self.cpu_s / self.sent * 1e6


async def _floor(tmp: str, size: int, reps: int) -> Floor:
    move, ack = await _capture(f"{tmp}/capture-{size}", size)
    both = move.merged(ack)
    store = RocksStore(f"{tmp}/floor-{size}")
    sender = _Sender(f"{tmp}/send-{size}")
    parts: dict[str, list[float]] = {p: [] for p in ("move", "ack", "both", "fsync", "wall")}

    def fsync() -> None:
        started = time.perf_counter()
        parts["fsync"].append(_timed(store.sync_wal))
        parts["wall"].append(time.perf_counter() - started)

    def write(name: str, written: Written) -> Callable[[], None]:
        return lambda: parts[name].append(_timed(partial(_write, store, written)))

    two = (write("move", move), write("ack", ack), fsync)  # today's round
    one = (write("both", both), fsync)  # the ack in the move's batch
    try:
        for r in range(reps):
            for step in (*two, *one) if r % 2 == 0 else (*one, *two):
                step()
            if r % SEND_EVERY == 0:
                await sender.send()
        handoff = statistics.median(_handoff_us(HANDOFF_REPS // 10) for _ in range(10))
        synced = f"{tmp}/fdatasync-{size}"
        append = _fdatasync_us(synced, reps // 4, append=True)
        overwrite = _fdatasync_us(synced, reps // 4, append=False)
        appended, recycled = _wal_fsync_us(f"{tmp}/{size}", both, reps // 2)
    finally:
        store.close()
        sender.engine.close()

    def med(name: str) -> float:
        return statistics.median(parts[name]) * 1e6

    return Floor(
        size,
        move.keys,
        ack.keys,
        med("move"),
        med("ack"),
        med("both"),
        med("fsync"),
        med("wall"),
        handoff,
        append,
        overwrite,
        appended,
        recycled,
        sender.us_per_msg,
    )


def _write(store: RocksStore, written: Written) -> None:
    store.write_staged(written.ranges, written.staged, sync=False)


def measure(sizes: tuple[int, ...] = FLOOR_SIZES, reps: int = FLOOR_REPS) -> list[Floor]:
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-floor-") as tmp:
        return [run(partial(_floor, tmp, size, reps)) for size in sizes]


def lines(floors: list[Floor], goal_ratio: float) -> list[str]:
    out = []
    for f in floors:
        out += [
            f"floor of a round of {f.size} (CPU µs, medians; a batch send of 1000 "
            f"{f.send_us:.1f} µs a message in the same process):",
            f"  move's WriteBatch ({f.move_keys} keys) {f.move_us:.1f}; ack's "
            f"({f.ack_keys} keys) {f.ack_us:.1f}; both as one {f.both_us:.1f}",
            f"  flush_wal(True) {f.fsync_us:.1f} CPU ({f.fsync_wall_us:.0f} wall); "
            f"a thread hand-off {f.handoff_us:.1f} (x{HANDOFFS_A_ROUND} a round)",
            f"  beside it, a plain fdatasync of 2 KiB appended {f.append_sync[0]:.1f} CPU "
            f"({f.append_sync[1]:.0f} wall), written over in place {f.overwrite_sync[0]:.1f} "
            f"({f.overwrite_sync[1]:.0f} wall)",
            f"  flush_wal(True) after a round's batches, WAL appended {f.wal_appended_us:.1f} CPU, "
            f"WAL recycled (recycle_log_file_num) {f.wal_recycled_us:.1f}",
        ]
        for name, us in (
            ("(a) two commits + one fsync", f.two_commits),
            ("(b) one commit + one fsync", f.one_commit),
            ("(c) as (b), the WAL recycled", f.one_commit_recycled),
        ):
            per = us / f.size
            out.append(
                f"  {name}: {us:.0f} µs a round, {per:.1f} µs a message = "
                f"x{per / f.send_us:.2f} a batch send (goal <= {goal_ratio:.0f} x)"
            )
    if len({f.size for f in floors}) > 1:
        out += _round_size_lines(floors, goal_ratio)
    return out


def _round_size_lines(floors: list[Floor], goal_ratio: float) -> list[str]:
    """The floor split into a part a message and a part a round (a line through the
    smallest and largest size), and the round size at which it meets the goal."""
    small, large = min(floors, key=lambda f: f.size), max(floors, key=lambda f: f.size)
    send = statistics.mean(f.send_us for f in floors)
    out = []
    structures: tuple[tuple[str, Callable[[Floor], float]], ...] = (
        ("(a)", lambda f: f.two_commits),
        ("(b)", lambda f: f.one_commit),
        ("(c)", lambda f: f.one_commit_recycled),
    )
    for name, of in structures:
        a_message = (of(large) - of(small)) / (large.size - small.size)
        a_round = of(small) - a_message * small.size
        room = goal_ratio * send - a_message
        needs = f"rounds of >= {a_round / room:.0f} messages" if room > 0 else "no round size"
        out.append(
            f"{name} floor ~ {a_message:.1f} µs a message + {a_round:.0f} µs a round: "
            f"{goal_ratio:.0f} x a batch send ({send:.1f} µs) needs {needs}"
        )
    return out
