"""Two builds (or two settings) of the service side by side: figure 1's single sends or
figure 2's batch sends, loaded on each in turn, in short windows, many times.

On a VM whose speed drifts by half from one second to the next (one build's figure 2 read
59k-111k msg/s in back-to-back runs), two figures run a minute apart compare the VM,
not the code. Here both servers are up at once and idle but for the window of load each
gets in turn (order alternating), so a drift lands on both; the answer is B's rate over
A's, overall and the median of the windows' ratios, and each server's CPU a message.
A window that got no reply (a short one on a busy machine) measures nothing: its round
gives no ratio and is counted as left out, on both sides, so the two stay comparable.

    python -m bench.ab /path/to/worktree-a /path/to/worktree-b
    python -m bench.ab . . --env-a ROCKTIMER_EVENTS=false          # one build, two settings
    python -m bench.ab ../old . --mode single --rounds 20
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import batch, send
from bench.bare_app import ROUTE
from bench.client import build_request, run
from tests.support import process

ROUNDS = 12
WINDOW_BATCHES = 40  # batches of 1000 a window (~0.5 s here)
WINDOW_S = 1.0  # of single sends
WARMUP_BATCHES = 5


@dataclass(slots=True)
class Side:
    server: process.AppProcess
    sent: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    rates: list[float] = field(default_factory=list)
    empty: int = 0  # windows that got no reply: their rounds are left out

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0


def _env(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"bench.ab: --env wants NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


def _load(
    mode: str, port: int, pid: int, size: int
) -> Callable[[], Coroutine[Any, Any, tuple[int, float]]]:
    """One window of load on a server: (messages stored, seconds)."""
    if mode == "single":
        request = build_request("POST", f"{process.HOST}:{port}", ROUTE, send.MESSAGE)

        async def singles() -> tuple[int, float]:
            result = await send.closed_loop(
                port,
                request,
                connections=send.CONNECTIONS,
                warmup_s=0.2,
                seconds=WINDOW_S * size / WINDOW_BATCHES,
                expect=201,
                server_pid=pid,
            )
            return result.ok, result.seconds

        return singles

    async def batches() -> tuple[int, float]:
        stats = await batch.send(port, size, size=1000)
        return stats.stored, stats.seconds

    return batches


def compare(
    tree_a: Path,
    tree_b: Path,
    *,
    env_a: dict[str, str],
    env_b: dict[str, str],
    mode: str,
    rounds: int,
    size: int = WINDOW_BATCHES,
) -> tuple[Side, Side, list[float]]:
    """Run the windows; returns both sides and each round's B ÷ A."""
    root = process.ROOT
    with tempfile.TemporaryDirectory(prefix="rocktimer-bench-ab-") as tmp:
        sides: list[Side] = []
        try:
            for name, tree, env in (("a", tree_a, env_a), ("b", tree_b, env_b)):
                process.ROOT = tree.resolve()  # `python -m app` of that tree
                work = Path(tmp) / name
                work.mkdir()
                sides.append(Side(process.service(work, env).start()))
        finally:
            process.ROOT = root
        a, b = sides[0], sides[-1]
        try:
            for side in sides:
                run(_load(mode, side.server.port, side.server.pid, WARMUP_BATCHES))
            ratios = []
            for i in range(rounds):
                windows = []
                for side in (a, b) if i % 2 == 0 else (b, a):
                    cpu = process.cpu_seconds(side.server.pid)
                    sent, seconds = run(_load(mode, side.server.port, side.server.pid, size))
                    windows.append(
                        (side, sent, seconds, process.cpu_seconds(side.server.pid) - cpu)
                    )
                empty = [side for side, sent, seconds, _ in windows if sent <= 0 or seconds <= 0]
                for side in empty:
                    side.empty += 1
                if empty:
                    continue
                for side, sent, seconds, cpu_s in windows:
                    side.cpu_s += cpu_s
                    side.sent += sent
                    side.seconds += seconds
                    side.rates.append(sent / seconds)
                ratios.append(b.rates[-1] / a.rates[-1])
        finally:
            for side in sides:
                side.server.stop()
    return a, b, ratios


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n")[0])
    parser.add_argument("tree_a", type=Path)
    parser.add_argument("tree_b", type=Path)
    parser.add_argument("--env-a", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--env-b", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--mode", choices=["batch", "single"], default="batch")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    for tree in (args.tree_a, args.tree_b):
        if not (tree / "app" / "__main__.py").is_file():
            raise SystemExit(f"bench.ab: {tree} is not a rocktimer tree (no app/__main__.py)")
    a, b, ratios = compare(
        args.tree_a,
        args.tree_b,
        env_a=_env(args.env_a),
        env_b=_env(args.env_b),
        mode=args.mode,
        rounds=args.rounds,
    )
    unit = "msg/s" if args.mode == "batch" else "req/s"
    print("\n".join(summary(a, b, ratios, args.rounds, unit)))


def summary(a: Side, b: Side, ratios: list[float], rounds: int, unit: str) -> list[str]:
    """Each side's rate and CPU a message, then B ÷ A over the rounds both sides measured."""
    lines = []
    for name, side in (("A", a), ("B", b)):
        per = side.cpu_s / side.sent * 1e6 if side.sent else 0.0
        lines.append(f"{name} {side.rate:,.0f} {unit}, server CPU {per:.1f} µs a message")
    empty = f"windows without a reply: A {a.empty}, B {b.empty}"
    if not ratios:
        lines.append(f"B ÷ A: no round got replies on both sides ({empty}); no ratio")
        return lines
    left_out = rounds - len(ratios)
    lines.append(
        f"B ÷ A {b.rate / a.rate:.3f} overall, {statistics.median(ratios):.3f} median of "
        f"{len(ratios)} rounds (min {min(ratios):.3f}, max {max(ratios):.3f})"
        + (f"; {left_out} rounds left out ({empty})" if left_out else "")
    )
    return lines


if __name__ == "__main__":
    main()
