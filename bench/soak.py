"""Figure 15: the soak — nothing grows without bound under steady load.

An engine in this process on a fresh data dir, on a fake clock (an hour of service in a
few minutes of real time, most of it WAL fsyncs), RocksDB's buffers scaled down (see
``small_buffers``): SENDS_PER_S messages a fake second, sent a step (STEP_MS) at a time
(most due at once, a fifth 30 s ahead, of which half are cancelled); group ``ok``
receives and acks everything, group ``flaky`` nacks every other message (fixed 5 s
retry, 2 attempts: a steady stream of dead letters), group ``lazy`` takes one message a
minute and never comes back, and group ``ops`` reads ``%DLQ%flaky`` and acks. Retention
(messages and dead letters) is RETENTION_MS; the sweeper runs every fake minute. Each fake
minute: keys per column family (counted), the data dir's size, and this process's VmRSS.

Flat means: from two retention periods in (the store has filled to its steady state) to
the end, the peak of each measure in the later half is within FLAT_LIMIT of the earlier
half's. Written to ``bench/soak-<profile>.md`` and ``bench/soak-<profile>.png``.

    python -m bench.soak
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import report, scale
from storage import store
from storage.records import MessageRecord
from storage.store import CF
from tests.support import process
from workers.clock import FakeClock
from workers.engine import Engine, EngineConfig
from workers.exporter import EVENTS_DIR
from workers.rules.retry import FixedPolicy, GroupSettings

RETENTION_MS = 5 * 60_000
STEP_MS = 10_000
SAMPLE_EVERY_MS = 60_000
SENDS_PER_S = 50
DELAYED_SHARE = 5  # every 5th send is due DELAY_MS ahead; every other of those cancelled
DELAY_MS = 30_000
INVISIBLE_MS = 10_000
FLAT_LIMIT = 1.25  # later peak / earlier peak
SETTLE_TIMEOUT_S = 30.0
OUT_DIR = process.ROOT / "bench"
MIB = 2**20
_END = b"\xff" * 16


DISK_PARTS = ("SSTs", "WAL", "event segments", "info LOG and other")


@dataclass(frozen=True, slots=True)
class Sample:
    minute: int
    keys: dict[str, int]  # per column family
    disk: dict[str, int]  # bytes per DISK_PARTS entry
    rss_kib: int

    @property
    def all_keys(self) -> int:
        return sum(self.keys.values())

    @property
    def disk_bytes(self) -> int:
        return sum(self.disk.values())


def _disk_part(relative: Path) -> str:
    if relative.parts[0] == EVENTS_DIR:
        return "event segments"
    return {".sst": "SSTs", ".log": "WAL"}.get(relative.suffix, "info LOG and other")


def disk_parts(data_dir: Path) -> dict[str, int]:
    """The data dir's allocated bytes (as du counts them) by what the files are."""
    parts = dict.fromkeys(DISK_PARTS, 0)
    for path in data_dir.rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # RocksDB removed it meanwhile
            if path.is_file():
                parts[_disk_part(path.relative_to(data_dir))] += path.lstat().st_blocks * 512
    return parts


def _settle(engine: Engine, clock: FakeClock) -> None:
    """Wait (real time, bounded) until every timer due by now has been moved."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        due = engine.scanner.next_due_ms
        if (due is None or due > clock.now_ms()) and engine.put_queue.empty():
            return
        time.sleep(0.001)
    raise RuntimeError("the engine did not deliver what fell due within the timeout")


def _sample(engine: Engine, minute: int, data_dir: Path) -> Sample:
    counts = {cf: len(engine.store.scan(cf, b"", _END, 10**9)) for cf in CF.ALL}
    rss = process.status_kib(os.getpid(), "VmRSS")
    return Sample(minute, counts, disk_parts(data_dir), rss)


def _step(engine: Engine, clock: FakeClock, n: int) -> None:
    """One step of traffic: the independent calls run at once, so they share commits."""
    now = clock.now_ms()
    count = SENDS_PER_S * STEP_MS // 1000
    recs = [
        MessageRecord(
            topic="soak",
            msg_id=f"m{n}-{i}",
            deliver_at_ms=now + (DELAY_MS if i % DELAYED_SHARE == 0 else 0),
            created_at_ms=0,
            body=b"soak " * 20,
        )
        for i in range(count)
    ]

    async def consume(topic: str, group: str, nack_every: int = 0) -> None:
        got = await engine.receive(topic, group, 1000, 0, INVISIBLE_MS)
        failed = got[::nack_every] if nack_every else []
        await asyncio.gather(
            engine.ack(topic, group, [g.receipt for g in got if g not in failed]),
            engine.nack(topic, group, [g.receipt for g in failed], None),
        )

    async def traffic() -> None:
        # The last step's delayed messages are cancelled (every other one) beside this
        # step's sends and receives: one gather, so the step shares one or two fsyncs.
        cancels = [
            engine.cancel("soak", f"m{n - 1}-{i}")
            for i in range(0, count if n else 0, 2 * DELAYED_SHARE)
        ]
        lazy = [engine.receive("soak", "lazy", 1, 0, INVISIBLE_MS)] if now % 60_000 == 0 else []
        await asyncio.gather(
            engine.send_batch(recs),
            *cancels,
            *lazy,
            consume("soak", "ok"),
            consume("soak", "flaky", nack_every=2),
            consume("%DLQ%flaky", "ops"),
        )

    asyncio.run(traffic())


SCALED = ("WRITE_BUFFER_BYTES", "MAX_TOTAL_WAL_BYTES", "BLOCK_CACHE_BYTES", "MAX_LOG_FILE_BYTES")
SCALE_DOWN = 16


@contextlib.contextmanager
def small_buffers() -> Iterator[None]:
    """RocksDB's memtables, WAL, block cache and info LOG scaled down 16x (storage/store.py),
    so that they fill within the soak: at any load they bound disk and memory; the soak is
    about what the service itself keeps, which shows only once RocksDB's buffers are full
    and cycling."""
    saved = {name: getattr(store, name) for name in SCALED}
    for name, value in saved.items():
        setattr(store, name, value // SCALE_DOWN)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(store, name, value)


def measure(minutes: int) -> list[Sample]:
    with small_buffers(), tempfile.TemporaryDirectory(prefix="rocktimer-soak-") as work:
        data_dir = Path(work) / "data"
        clock = FakeClock(1_700_000_000_000 - 1_700_000_000_000 % SAMPLE_EVERY_MS)
        config = EngineConfig(
            data_dir=str(data_dir),
            retention_ms=RETENTION_MS,
            dlq_retention_ms=RETENTION_MS,
            events_retention_ms=RETENTION_MS,  # the event log's segments cycle too
            sweep_interval_ms=10**12,  # swept by hand below, every fake minute
        )
        engine = Engine(config, clock)
        engine.start()
        try:
            retry = FixedPolicy(policy="fixed", interval_ms=5_000)
            flaky = GroupSettings(max_attempts=2, retry=retry)
            asyncio.run(engine.put_group_settings("soak", "flaky", flaky))
            samples = [_sample(engine, 0, data_dir)]
            steps_per_sample = SAMPLE_EVERY_MS // STEP_MS
            for n in range(minutes * steps_per_sample):
                _step(engine, clock, n)
                clock.advance(STEP_MS)
                _settle(engine, clock)
                if (n + 1) % steps_per_sample == 0:
                    engine.sweeper.retain()
                    minute = (n + 1) // steps_per_sample
                    samples.append(_sample(engine, minute, data_dir))
                    print(f"[soak] minute {minute}/{minutes}", file=sys.stderr, flush=True)
            return samples
        finally:
            engine.stop()


# --- outputs ------------------------------------------------------------------------------


def markdown(samples: list[Sample], caption: str) -> str:
    disk = " | ".join(f"{part} MiB" for part in DISK_PARTS)
    head = f"| fake minute | {' | '.join(CF.ALL)} | all keys | {disk} | disk MiB | RSS MiB |"
    lines = [caption, "", head, "|" + "---|" * (len(CF.ALL) + len(DISK_PARTS) + 5)]
    for s in samples:
        keys = " | ".join(f"{s.keys[cf]:,}" for cf in CF.ALL)
        parts = " | ".join(f"{s.disk[part] / MIB:,.1f}" for part in DISK_PARTS)
        lines.append(
            f"| {s.minute} | {keys} | {s.all_keys:,} | {parts} | {s.disk_bytes / MIB:,.1f} "
            f"| {s.rss_kib / 1024:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def chart(samples: list[Sample], caption: str, path: Path) -> None:
    """Keys per column family, disk by kind of file and RSS against fake minutes, as a PNG
    (Agg): the retention period and the two halves compared are marked on each panel, with
    the flat limit (FLAT_LIMIT x the earlier half's peak) of the measure compared."""
    from matplotlib.axes import Axes
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    xs = [s.minute for s in samples]
    earlier, later = halves(samples)
    fig = Figure(figsize=(15, 5.6), layout="constrained")
    FigureCanvasAgg(fig)
    keys_ax, disk_ax, rss_ax = fig.subplots(1, 3, sharex=True)

    keys_ax.plot(xs, [s.all_keys for s in samples], color="black", linewidth=2, label="all")
    for cf in CF.ALL:
        keys_ax.plot(xs, [s.keys[cf] for s in samples], label=f"{cf} ({samples[-1].keys[cf]:,})")
    keys_ax.set_yscale("symlog", linthresh=10)  # 150 timers and 30k in-flight records alike
    keys_ax.set_title("keys per column family (log scale; at the end)")
    keys_ax.legend(fontsize=7, ncols=2, loc="lower right", framealpha=0.9)

    disk_ax.stackplot(
        xs,
        *[[s.disk[part] / MIB for s in samples] for part in DISK_PARTS],
        labels=DISK_PARTS,
        colors=["tab:brown", "tab:orange", "tab:cyan", "tab:gray"],
        alpha=0.8,
    )
    disk_ax.set_title("data dir on disk (MiB), by kind of file")
    disk_ax.legend(fontsize=7, loc="upper left", framealpha=0.9)

    rss_ax.plot(xs, [s.rss_kib / 1024 for s in samples], color="tab:purple", label="VmRSS")
    rss_ax.set_title("process RSS (MiB)")
    rss_ax.legend(fontsize=7, loc="lower right", framealpha=0.9)

    retention_min = RETENTION_MS / SAMPLE_EVERY_MS
    measures: list[tuple[Axes, Callable[[Sample], float]]] = [
        (keys_ax, lambda s: s.all_keys),
        (disk_ax, lambda s: s.disk_bytes / MIB),
        (rss_ax, lambda s: s.rss_kib / 1024),
    ]
    for ax, measure in measures:
        ax.axvspan(earlier[0].minute, earlier[-1].minute, color="tab:green", alpha=0.08)
        ax.axvspan(later[0].minute, later[-1].minute, color="tab:blue", alpha=0.08)
        ax.axvline(retention_min, color="grey", linestyle="--", linewidth=1)
        limit = FLAT_LIMIT * max(map(measure, earlier))
        ax.axhline(limit, color="tab:red", linestyle="--", linewidth=0.8)
        ax.set_xlabel("fake minutes of service")
        ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1], limit * 1.08))
        ax.grid(True, alpha=0.3)
    marks = [
        Line2D([], [], color="grey", linestyle="--", label=f"retention ({retention_min:g} min)"),
        Patch(color="tab:green", alpha=0.2, label="earlier half of the steady state"),
        Patch(color="tab:blue", alpha=0.2, label="later half"),
        Line2D(
            [],
            [],
            color="tab:red",
            linestyle="--",
            label=f"flat limit: {FLAT_LIMIT}x the earlier half's peak (all keys, disk, RSS)",
        ),
    ]
    fig.legend(handles=marks, loc="outside lower center", ncols=len(marks), fontsize=8)
    fig.suptitle(caption, fontsize=9)
    fig.savefig(str(path), dpi=100)


def write_outputs(samples: list[Sample], profile: str, out_dir: Path) -> tuple[Path, Path]:
    today = datetime.date.today().isoformat()
    caption = (
        f"rocktimer soak, {profile} profile, {today}, commit {report.revision()} — "
        f"{report.machine()}\n{SENDS_PER_S} sends/s on a fake clock, retention "
        f"{RETENTION_MS // 60_000} min (dashed line); the peaks of the shaded halves of the "
        f"steady state (from {2 * RETENTION_MS // 60_000} min) are compared"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / f"soak-{profile}.md"
    png = out_dir / f"soak-{profile}.png"
    md.write_text(markdown(samples, caption), encoding="utf-8")
    chart(samples, caption, png)
    return md, png


def halves(samples: list[Sample]) -> tuple[list[Sample], list[Sample]]:
    """The samples from the steady state on, split in two halves (earlier, later)."""
    steady = [s for s in samples if s.minute >= 2 * RETENTION_MS // SAMPLE_EVERY_MS]
    steady = steady if len(steady) >= 2 else samples[-2:]
    middle = len(steady) // 2
    return steady[:middle], steady[middle:]


def rows(samples: list[Sample], files: tuple[Path, Path]) -> list[report.Row]:
    """Per measure: the peak of the later half of the steady state over the earlier half's
    (RocksDB's flushes and compactions make disk and memory a saw-tooth: peaks compare)."""
    earlier, later = halves(samples)
    where = " and ".join(_shown(f) for f in files)
    span = f"peak, minutes {earlier[0].minute}-{earlier[-1].minute} vs to {later[-1].minute}"

    def row(name: str, measure: Callable[[Sample], float], unit: str) -> report.Row:
        a, b = max(map(measure, earlier)), max(map(measure, later))
        ratio = b / a if a else 1.0
        return report.Row(
            "15",
            f"soak: {name}, {span}",
            f"{b:,.0f} {unit}",
            f"{a:,.0f} {unit}",
            f"{ratio:.2f}",
            f"<= {FLAT_LIMIT}",
            ratio <= FLAT_LIMIT,
            where,
        )

    return [
        row("keys, all column families", lambda s: s.all_keys, "keys"),
        row("disk", lambda s: s.disk_bytes / MIB, "MiB"),
        row("RSS", lambda s: s.rss_kib / 1024, "MiB"),
    ]


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(process.ROOT))
    except ValueError:
        return str(path)


def run_figure(minutes: int, profile: str, out_dir: Path = OUT_DIR) -> list[report.Row]:
    samples = measure(minutes)
    return rows(samples, write_outputs(samples, profile, out_dir))


def main() -> None:
    s = scale.current()
    print(report.table(run_figure(s.soak_minutes, s.name), s.name))


if __name__ == "__main__":
    main()
