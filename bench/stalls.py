"""The machine's own CPU stalls: a floor for the lateness figures (3 and 10).

A busy Python loop, nothing else running, times fixed chunks of work (``spin``, ~0.2 ms) by
its thread's CPU time. On a quiet machine every chunk costs about the same; on a shared
VM the whole machine now and then runs several times slower for tens of milliseconds
(on the 2-core VM of bench/README.md: 50-100 ms bursts at 5 x or more slower,
every 1.5-2 s, seen at the same instants by loops on both cores). A timer falling due
inside such a burst is late whatever the server does, so the figures report these beside
their lateness, measured in the same run.

    python -m bench.stalls
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench import report, scale
from bench.stats import percentile

CHUNK_UNITS = 500  # a chunk: ``spin`` units, ~0.2 ms of CPU on the 2-core Xeon VM
SLOW_FACTOR = 5.0  # a chunk this many times its median's CPU time is stalled
BURST_GAP_MS = 100.0  # stalled chunks this close together are one burst
SECONDS = 10.0
SPIN_UNIT = 12  # additions per spin unit (~1 µs here)
CALIBRATE_UNITS = 20_000


@dataclass(frozen=True, slots=True)
class Burst:
    start_ms: float
    end_ms: float
    chunks: int

    @property
    def ms(self) -> float:
        return self.end_ms - self.start_ms


@dataclass(frozen=True, slots=True)
class Stalls:
    seconds: float
    chunk_ms: float  # a chunk's median CPU time
    bursts: list[Burst]
    slowdown: float  # a stalled chunk's median CPU time over chunk_ms

    @property
    def stalled_share(self) -> float:
        """How much of the run the machine spent in bursts."""
        return sum(b.ms for b in self.bursts) / (self.seconds * 1e3)

    def describe(self) -> str:
        if not self.bursts:
            return f"no stall in {self.seconds:.0f} s"
        longest = max(b.ms for b in self.bursts)
        return (
            f"{len(self.bursts)} bursts in {self.seconds:.0f} s, "
            f"{self.stalled_share:.1%} of the time, longest {longest:.0f} ms, "
            f"{self.slowdown:.0f} x slower"
        )


def spin(units: int) -> None:
    """A fixed amount of work (``units`` of ~1 µs on a quiet core): unlike a loop on the
    thread's CPU clock, it takes longer when the machine stalls, as a server's work does."""
    for _ in range(units):
        total = 0
        for i in range(SPIN_UNIT):
            total += i


def units_per_us() -> float:
    """How many ``spin`` units a µs holds: the fastest of three calibrations (a stall
    during one makes it read slow)."""
    best = 0.0
    for _ in range(3):
        started = time.perf_counter()
        spin(CALIBRATE_UNITS)
        best = max(best, CALIBRATE_UNITS / ((time.perf_counter() - started) * 1e6))
    return best


def group(stalled_at_ms: Sequence[float], gap_ms: float = BURST_GAP_MS) -> list[Burst]:
    """Stalled chunks' end times (sorted) into bursts: those within ``gap_ms`` of the
    previous one join its burst."""
    bursts: list[Burst] = []
    for at in stalled_at_ms:
        if bursts and at - bursts[-1].end_ms <= gap_ms:
            last = bursts[-1]
            bursts[-1] = Burst(last.start_ms, at, last.chunks + 1)
        else:
            bursts.append(Burst(at, at, 1))
    return bursts


def classify(cpu_ms: Sequence[float], at_ms: Sequence[float]) -> Stalls:
    """Chunks' CPU times and end times (ms) into the run's stalls."""
    ordered = sorted(cpu_ms)
    median = percentile(ordered, 50)
    slow = [(at, cpu) for at, cpu in zip(at_ms, cpu_ms, strict=True) if cpu >= SLOW_FACTOR * median]
    seconds = (at_ms[-1] - at_ms[0]) / 1e3 if len(at_ms) > 1 else 0.0
    slowdown = percentile(sorted(cpu for _, cpu in slow), 50) / median if slow else 1.0
    return Stalls(seconds, median, group([at for at, _ in slow]), slowdown)


def measure(seconds: float = SECONDS) -> Stalls:
    """Run the busy loop for ``seconds`` on this thread."""
    cpu_ms: list[float] = []
    at_ms: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.thread_time()
        spin(CHUNK_UNITS)
        cpu_ms.append((time.thread_time() - started) * 1e3)
        at_ms.append(time.monotonic() * 1e3)
    return classify(cpu_ms, at_ms)


def row(number: str, stalls: Stalls) -> report.Row:
    """The floor row a lateness figure shows beside its own."""
    return report.Row(
        number,
        "machine CPU stalls (a busy Python loop, nothing else running)",
        stalls.describe(),
        f"a chunk {stalls.chunk_ms:.2f} ms of CPU",
        "-",
        "-",
        None,
        f"stalled: a chunk >= {SLOW_FACTOR:.0f} x its median; bursts: stalled chunks "
        f"<= {BURST_GAP_MS:.0f} ms apart",
    )


def measured_row(number: str, seconds: float) -> report.Row:
    """Figure ``number``'s stall row, measured now for up to ``seconds`` (its window)."""
    return row(number, measure(min(seconds, SECONDS)))


def main() -> None:
    print(report.table([row("-", measure())], scale.current().name))


if __name__ == "__main__":
    main()
