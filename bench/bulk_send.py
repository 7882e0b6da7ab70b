"""A bulk load's batch sends beside figure 2's, on the server: CPU a message and msg/s.

A bulk load (``pipeline.bulk_load``) sends batches whose items carry a client msg_id (to
look up: a resend must not make a second message), a deliver time anywhere in the next
years (a timer key anywhere in the memtable), a tag, properties, and a few rows twice
(bench/loader.py, ``bulk_bodies``: the generator's mix, built without Spark). Figure 2's
items are alike, id-less and due together. Here both kinds are sent to the same server in
windows that alternate, so the bulk load's cost a message stands beside figure 2's in the
same minutes; with two trees (another build's worktree, then this one), both servers are
up at once and every window runs on each in turn (order alternating), giving each kind's
B ÷ A as well. Each bulk window is new messages (its own seed); its repeats count as
messages (answered 200). ``--age-s``: the rows' times as a file made that long before
it is sent, whose first bursts are due by then (figure 16's load and replay send rows
generated minutes earlier): those go into the topic log at once.

    python -m bench.bulk_send                      # this tree: bulk ÷ figure 2
    python -m bench.bulk_send ../old .             # two trees: B ÷ A of each kind too
    python -m bench.bulk_send ../old . --rounds 9 --window 100
    python -m bench.bulk_send ../old . --age-s 300  # a file made five minutes before
    python -m bench.bulk_send --in-process         # no server: a batch's steps, a message

``--in-process`` takes the server, HTTP and the writer's threads away: each batch is read,
made records, staged (``send_many`` in a Txn) and committed in this process, on a store in
a temp dir, figure 2's batches and the bulk load's alternating; each step's CPU a message
(medians of the rounds'), the bulk load's and figure 2's side by side.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from app.__main__ import tune_gc
from app.config import Settings
from app.ids import new_msg_ids
from app.intake import to_record
from app.schemas import PlainSendBatch
from bench import batch, loader
from bench.client import run
from storage.store import RocksStore
from storage.txn import Txn
from tests.support import process
from workers.ops import messages

ROUNDS = 5
WINDOW_BATCHES = 40  # batches of 1000 a window, of either kind
WARMUP_BATCHES = 5
KINDS = ("figure 2", "bulk load")


@dataclass(slots=True)
class Window:
    messages: int  # items answered 201 or 200
    seconds: float
    cpu_s: float  # the server's, every thread


@dataclass(slots=True)
class Side:
    tree: Path
    server: process.AppProcess
    windows: dict[str, list[Window]] = field(default_factory=dict)

    def total(self, kind: str) -> Window:
        ws = self.windows.get(kind, [])
        return Window(
            sum(w.messages for w in ws), sum(w.seconds for w in ws), sum(w.cpu_s for w in ws)
        )


def cpu_us(w: Window) -> float:
    """The server's CPU a message, µs."""
    return w.cpu_s / w.messages * 1e6 if w.messages else 0.0


def rate(w: Window) -> float:
    return w.messages / w.seconds if w.seconds else 0.0


def _messages(stats: loader.LoadStats) -> int:
    return stats.stored + stats.failed.get(200, 0)


async def _figure_2(port: int, batches: int) -> int:
    return _messages(await batch.send(port, batches))


async def _bulk(port: int, bodies: dict[str, list[bytes]]) -> int:
    done = await loader.send_topics(process.HOST, port, bodies, deadline_s=batch.RUN_TIMEOUT_S)
    return sum(_messages(stats) for stats in done)


def window(side: Side, kind: str, batches: int, seed: int, age_ms: int = 0) -> Window:
    """One window of ``kind`` on ``side``'s server; bulk bodies built before it starts,
    their times as of ``age_ms`` before."""
    port = side.server.port
    start_ms = loader.now_ms() - age_ms
    bodies = (
        loader.bulk_bodies(batches * loader.BATCH_SIZE, seed=seed, start_ms=start_ms)
        if kind == "bulk load"
        else {}
    )
    cpu = process.cpu_seconds(side.server.pid)
    started = time.monotonic()
    sent = run(lambda: _figure_2(port, batches) if kind == "figure 2" else _bulk(port, bodies))
    seconds = time.monotonic() - started
    out = Window(sent, seconds, process.cpu_seconds(side.server.pid) - cpu)
    side.windows.setdefault(kind, []).append(out)
    return out


def compare(
    trees: list[Path], *, rounds: int, size: int = WINDOW_BATCHES, age_ms: int = 0
) -> list[Side]:
    """Every tree's server up at once; each round, each side (order alternating) gets a
    window of each kind (order alternating)."""
    root = process.ROOT
    seeds = itertools.count(time.time_ns())  # every bulk window: new ids
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-bulk-send-") as tmp:
        sides: list[Side] = []
        try:
            try:
                for i, tree in enumerate(trees):
                    process.ROOT = tree.resolve()  # `python -m app` of that tree
                    work = Path(tmp) / f"side-{i}"
                    work.mkdir()
                    sides.append(Side(tree, process.service(work).start()))
            finally:
                process.ROOT = root
            for side in sides:
                for kind in KINDS:
                    window(side, kind, WARMUP_BATCHES, next(seeds))
                side.windows.clear()
            for r in range(rounds):
                for side in sides if r % 2 == 0 else sides[::-1]:
                    for kind in KINDS if (r // 2) % 2 == 0 else KINDS[::-1]:
                        window(side, kind, size, next(seeds), age_ms)
        finally:
            for side in sides:
                side.server.stop()
    return sides


def _ratios(xs: list[Window], ys: list[Window], of: str) -> list[float]:
    """Round by round, ys's figure over xs's (``of``: "cpu" or "rate")."""
    f = cpu_us if of == "cpu" else rate
    return [f(y) / f(x) for x, y in zip(xs, ys, strict=True) if f(x) and f(y)]


def _median(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f}" if xs else "n/a"


def summary(sides: list[Side]) -> list[str]:
    """Each side's kinds (msg/s, CPU a message), bulk ÷ figure 2 on each side, and with
    two sides each kind's B ÷ A; ratios are medians of the rounds'."""
    lines = []
    names = "AB" if len(sides) == 2 else [""]
    for name, side in zip(names, sides, strict=True):
        label = f"{name} ({side.tree})" if name else str(side.tree)
        fig2, bulk = (side.windows.get(kind, []) for kind in KINDS)
        for kind in KINDS:
            t = side.total(kind)
            lines.append(
                f"{label} {kind}: {rate(t):,.0f} msg/s, server CPU {cpu_us(t):.2f} µs a message"
                f" ({t.messages:,} messages)"
            )
        lines.append(
            f"{label} bulk load ÷ figure 2: CPU a message {_median(_ratios(fig2, bulk, 'cpu'))}"
            f" x, msg/s {_median(_ratios(fig2, bulk, 'rate'))} x"
        )
    if len(sides) == 2:
        a, b = sides
        for kind in KINDS:
            xs, ys = a.windows.get(kind, []), b.windows.get(kind, [])
            lines.append(
                f"B ÷ A {kind}: CPU a message {_median(_ratios(xs, ys, 'cpu'))} x, "
                f"msg/s {_median(_ratios(xs, ys, 'rate'))} x"
            )
    return lines


STEPS = ("parse", "to_record", "send_many", "commit")


def batch_steps(store: RocksStore, topic: str, raw: bytes, settings: Settings) -> list[float]:
    """One batch send's steps, as the batch route and the writer take them (the route's
    common reading, its records, the op, the commit): each one's CPU seconds."""
    clock = time.process_time
    t0 = clock()
    items = PlainSendBatch.model_validate_json(raw).messages
    t1 = clock()
    now = loader.now_ms()
    fresh = [msg.msg_id is None for msg in items]
    made = iter(new_msg_ids(now, sum(fresh)))
    recs = [
        to_record(topic, msg, now, settings, ["body", "messages", i], msg.msg_id or next(made))
        for i, msg in enumerate(items)
    ]
    t2 = clock()
    txn = Txn(store, now)
    messages.send_many(txn, recs, fresh)
    t3 = clock()
    txn.commit(txn.pending_delta)
    return [t1 - t0, t2 - t1, t3 - t2, clock() - t3]


def in_process(rounds: int, batches: int, age_ms: int) -> dict[str, list[list[float]]]:
    """Each kind's steps, µs a message, round by round (figure 2's batches and the bulk
    load's alternating in one store, the collector tuned as the server's meanwhile)."""
    thresholds = gc.get_threshold()
    tune_gc()
    try:
        return _in_process(rounds, batches, age_ms)
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def _in_process(rounds: int, batches: int, age_ms: int) -> dict[str, list[list[float]]]:
    settings = Settings()
    size = loader.BATCH_SIZE
    fig2 = loader.batch_body([{"body": batch.BODY, "delay_ms": batch.DELAY_MS}] * size)
    out: dict[str, list[list[float]]] = {kind: [] for kind in KINDS}
    seeds = itertools.count(time.time_ns())
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-bulk-send-") as tmp:
        store = RocksStore(f"{tmp}/db")
        try:
            for r in range(rounds):
                for kind in KINDS if r % 2 == 0 else KINDS[::-1]:
                    if kind == "figure 2":
                        requests = [(batch.TOPIC, fig2)] * batches
                    else:
                        start_ms = loader.now_ms() - age_ms
                        bodies = loader.bulk_bodies(
                            batches * size, seed=next(seeds), start_ms=start_ms
                        )
                        requests = [(t, b) for t, bs in bodies.items() for b in bs]
                    total = [0.0] * len(STEPS)
                    for topic, raw in requests:
                        steps = batch_steps(store, topic, raw, settings)
                        total = [a + b for a, b in zip(total, steps, strict=True)]
                    n = batches * size
                    out[kind].append([x / n * 1e6 for x in total])
        finally:
            store.close()
    return out


def in_process_summary(out: dict[str, list[list[float]]]) -> list[str]:
    """Each step's median µs a message, the bulk load's beside figure 2's."""
    fig2, bulk = (
        [statistics.median(r[i] for r in out[kind]) for i in range(len(STEPS))] for kind in KINDS
    )
    lines = [
        f"{step}: bulk load {b:.2f} µs a message, figure 2 {f:.2f} ({b / f:.2f} x)"
        for step, b, f in zip(STEPS, bulk, fig2, strict=True)
    ]
    lines.append(f"all four: bulk load {sum(bulk):.2f}, figure 2 {sum(fig2):.2f} µs a message")
    return lines


def _problem(trees: list[Path], rounds: int, size: int, age_s: int) -> str | None:
    """What is wrong with the command line, in one line; None if nothing."""
    if len(trees) > 2:
        return "at most two trees"
    for tree in trees:
        if not (tree / "app" / "__main__.py").is_file():
            return f"{tree} is not a rocktimer tree (no app/__main__.py)"
    if rounds < 1 or size < 1:
        return "--rounds and --window must be at least 1"
    if age_s < 0:
        return "--age-s must be 0 or more"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bulk_send", description=__doc__.split("\n")[0]
    )
    parser.add_argument("trees", type=Path, nargs="*", help="zero (this tree), one or two trees")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--window", type=int, default=WINDOW_BATCHES, help="batches a window")
    parser.add_argument("--age-s", type=int, default=0, help="the bulk rows' age when sent")
    parser.add_argument("--in-process", action="store_true", help="no server: a batch's steps")
    args = parser.parse_args()
    trees = args.trees or [process.ROOT]
    problem = _problem(trees, args.rounds, args.window, args.age_s)
    if args.in_process and args.trees:
        problem = "--in-process measures this tree: give no trees"
    if problem:
        print(f"bench.bulk_send: {problem}", file=sys.stderr)
        raise SystemExit(2)
    if args.in_process:
        steps = in_process(args.rounds, args.window, args.age_s * 1000)
        print("\n".join(in_process_summary(steps)))
        return
    sides = compare(trees, rounds=args.rounds, size=args.window, age_ms=args.age_s * 1000)
    print("\n".join(summary(sides)))


if __name__ == "__main__":
    main()
