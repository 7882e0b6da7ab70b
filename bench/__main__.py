"""``python -m bench`` (``make bench``): every figure, one table on stdout.

BENCH_SCALE=full for the full sizes; BENCH_STORM_N, BENCH_CONSUME_N, BENCH_NACK_N,
BENCH_PENDING_N, BENCH_RECLAIM_N, BENCH_PIPELINE_N, BENCH_GROWTH_LEVELS (bench/scale.py),
BENCH_SCHEDULES_N, BENCH_FILTER_N and BENCH_PUSH_N override single sizes; figure 16 (Spark)
runs only when named or with BENCH_SCALE=full. Figure numbers as arguments run only those:
``python -m bench 5 7``.
Progress goes to stderr. See bench/README.md for what each figure measures.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from bench import (
    batch,
    cluster,
    deliver,
    events,
    filtered,
    growth,
    lateness,
    ontime,
    pending,
    pipeline,
    push,
    receive,
    reclaim,
    redis_alt,
    report,
    reschedule,
    scale,
    schedules,
    send,
    soak,
    storm,
    stream,
)

Figure = tuple[str, str, Callable[[], list[report.Row]]]


def figures(s: scale.Scale) -> list[Figure]:
    # Figure 6 compares Redis with figures 2-4 of the same run: they hand it their results.
    ours = redis_alt.Ours()

    def batch_rows() -> list[report.Row]:
        ours.batch = batch.measure(batches=s.batches)
        return batch.rows(ours.batch)

    def lateness_rows() -> list[report.Row]:
        ours.lateness = lateness.measure(seconds=s.lateness_seconds)
        return lateness.rows(ours.lateness)

    def storm_rows() -> list[report.Row]:
        ours.storm = storm.measure(n=s.storm_n)
        return storm.rows(ours.storm)

    return [
        (
            "1",
            "single send vs bare FastAPI",
            lambda: send.run_figure(warmup_s=s.send_warmup_s, seconds=s.send_seconds),
        ),
        ("2", "batch send vs raw WriteBatch", batch_rows),
        ("3", "lateness", lateness_rows),
        ("4", "storm", storm_rows),
        (
            "5",
            "consume and nack vs batch send",
            lambda: receive.run_figure(consume_n=s.consume_n, nack_n=s.nack_n),
        ),
        (
            "6",
            "Redis sorted-set delay queue",
            lambda: redis_alt.run_figure(
                batches=s.batches, seconds=s.lateness_seconds, storm_n=s.storm_n, ours=ours
            ),
        ),
        ("7", "pending far-future timers", lambda: pending.run_figure(n=s.pending_n)),
        ("8", "tombstone reclaim", lambda: reclaim.run_figure(n=s.reclaim_n)),
        (
            "9",
            "growth curve",
            lambda: growth.run_figure(levels=s.growth_levels, profile=s.name),
        ),
        (
            "10",
            "on time under load",
            lambda: ontime.run_figure(seconds=s.ontime_seconds),
        ),
        (
            "11",
            "event log on vs off",
            lambda: events.run_figure(
                warmup_s=s.send_warmup_s,
                seconds=s.send_seconds,
                batches=s.batches,
                storm_n=s.storm_n,
            ),
        ),
        ("12", "reschedule vs single send", lambda: reschedule.run_figure(s)),
        ("13", "recurring schedules at scale", lambda: schedules.run_figure(schedules.size())),
        ("14", "filtered vs unfiltered receive", lambda: filtered.run_figure(filtered.size())),
        ("15", "soak", lambda: soak.run_figure(minutes=s.soak_minutes, profile=s.name)),
        ("16", "Spark pipeline", lambda: pipeline.run_figure(n=s.pipeline_n)),
        (
            "17",
            "push delivery (webhooks)",
            lambda: push.run_figure(seconds=s.lateness_seconds, n=s.push_n),
        ),
        (
            "18",
            "streaming receive",
            lambda: stream.run_figure(
                seconds=s.stream_seconds, streams=s.streams_open, probes=s.stream_probes
            ),
        ),
        (
            "19",
            "CPU a message delivered and acked vs batch send",
            lambda: deliver.run_figure(seconds=s.deliver_seconds, rounds=s.deliver_rounds),
        ),
        ("20", "cluster mode vs one node", cluster.run_figure),
    ]


# Minutes of Spark even at the quick size, and minutes of 7 NATS servers and nodes with 20
# owner kills: run only when named (python -m bench 16 19) or full.
OPT_IN = {"16", "19"}


def main(argv: list[str]) -> None:
    s = scale.current()
    plan = figures(s)
    known = {number for number, _, _ in plan}
    if unknown := sorted(set(argv) - known):
        raise SystemExit(f"unknown figure(s) {', '.join(unknown)}; figures are 1-{len(plan)}")
    rows: list[report.Row] = []
    load_before = report.load_average()
    started = time.monotonic()
    for number, name, figure in plan:
        if argv and number not in argv:
            continue
        if not argv and number in OPT_IN and s.name != "full":
            continue
        print(f"[bench {s.name}] figure {number} {name} ...", file=sys.stderr, flush=True)
        begun = time.monotonic()
        rows += figure()
        took = time.monotonic() - begun
        print(f"[bench {s.name}] figure {number} took {took:.0f} s", file=sys.stderr, flush=True)
    took = time.monotonic() - started
    print(f"[bench {s.name}] done in {took:.0f} s", file=sys.stderr, flush=True)
    note = f"{took:.0f} s; load average (1/5/15 min) {load_before} before, "
    note += f"{report.load_average()} after"
    print(report.table(rows, s.name, note))


if __name__ == "__main__":
    main(sys.argv[1:])
