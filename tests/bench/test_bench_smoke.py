"""Tiny runs of every bench figure, so the scripts cannot rot between `make bench` runs.

Each starts the real service (and the bare app) as a child process, as the bench does,
at a size that takes a few seconds; the numbers are not checked, only that each figure
runs to the end, counts what it sent, and renders its rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from app.config import Settings
from app.intake import to_record
from app.schemas import SendBatch
from bench import (
    ab,
    batch,
    bulk_send,
    deliver,
    deliver_floor,
    events,
    growth,
    lateness,
    loader,
    ontime,
    pending,
    probe,
    push,
    receive,
    reclaim,
    redis_alt,
    report,
    scale,
    send,
    soak,
    stalls,
    storm,
    stream,
)
from bench.stats import percentile, spread
from storage.store import CF, Put, RocksStore
from tests.support import process

TINY_PROBE = probe.Shape(n=100, span_ms=100, lead_ms=500)


def rendered(rows: list[report.Row]) -> str:
    text = report.table(rows, "smoke")
    assert text.count("\n|") == len(rows) + 2  # header, rule, one line per row
    return text


@pytest.mark.slow
def test_send_figure_runs() -> None:
    rows = send.run_figure(connections=4, warmup_s=0.2, seconds=0.5)
    assert [r.number for r in rows] == ["1", "1"]
    assert "req/s" in rows[0].result
    assert "errors" not in rows[0].notes
    rendered(rows)


@pytest.mark.slow
def test_batch_figure_runs() -> None:
    rows = batch.run_figure(batches=3, size=100)
    assert "300 msgs" in rows[0].notes
    assert "failed" not in rows[0].notes
    rendered(rows)


@pytest.mark.slow
def test_event_log_figure_runs() -> None:
    order = (("off", events.OFF), ("on", events.ON))
    rows = events.run_figure(warmup_s=0.2, seconds=0.5, batches=3, storm_n=1_500, order=order)
    assert [r.number for r in rows] == ["11", "11", "11"]
    assert all(r.ratio != "0.00" for r in rows), rows
    rendered(rows)


@pytest.mark.slow
def test_push_figure_runs() -> None:
    rows = push.run_figure(seconds=0.2, n=500)
    assert [r.number for r in rows] == ["17", "17", "17"]
    assert rows[2].figure.startswith("machine CPU stalls")
    assert rows[0].notes.startswith("1,000/1,000 received")
    assert "msg/s" in rows[1].result
    rendered(rows)


@pytest.mark.slow
def test_lateness_figure_runs() -> None:
    rows = lateness.run_figure(seconds=1, rate=300)
    assert len(rows) == 5
    assert all(r.notes.startswith("300/300 received") for r in rows[:2])
    assert "doing 40 µs of work a timer (1% of a core)" in rows[2].figure
    assert "doing 100 µs of work a timer (3% of a core)" in rows[3].figure
    assert all(r.notes.startswith("300 timers") for r in rows[2:4])
    assert rows[4].figure.startswith("machine CPU stalls")
    rendered(rows)


@pytest.mark.slow
def test_ontime_figure_runs() -> None:
    rows = ontime.run_figure(seconds=0.5, rate=400, consume_ceiling=2_000)
    assert len(rows) == 11
    assert all(r.number == "10" for r in rows)
    lateness, throughput = rows[:6], rows[6:10]
    assert rows[10].figure.startswith("machine CPU stalls")
    assert all(r.notes.startswith("200/200 received") for r in lateness)
    assert all(r.ceiling.startswith("timers alone p50 ") for r in lateness)
    assert [r.ceiling.split(" ")[0] for r in throughput] == ["producer"] * 2 + ["consumers"] * 2
    assert all(r.result.endswith(" msg/s") for r in throughput)
    rendered(rows)


@pytest.mark.slow
def test_storm_figure_runs() -> None:
    rows = storm.run_figure(n=1_500)
    drain, memory, delivered = rows
    assert "timers/s" in drain.result
    assert "MiB" in memory.result
    assert delivered.result == "1,500 distinct msg_ids"
    assert delivered.met is True
    rendered(rows)


@pytest.mark.slow
def test_consume_figure_runs() -> None:
    rows = receive.run_figure(consume_n=2_000, nack_n=300, consumers=2)
    consume, nack, big, cpu = rows
    assert consume.notes.startswith("2,000 acked")
    assert nack.notes.startswith("300 nacked")
    assert nack.met is None  # clean: every receipt nacked once, nothing received twice
    assert "msg/s" in consume.result
    assert "batch send 100/request" in consume.ceiling
    assert big.notes.startswith("2,000 acked")  # over the rounds, each message once
    assert "batch send 1000/request" in big.ceiling
    assert cpu.result.endswith(" µs")
    assert cpu.ratio != "n/a"  # both sides measured
    assert "2 alternating rounds, ratios " in cpu.notes  # a round of 1000 each
    rendered(rows)


@pytest.mark.slow
def test_pending_figure_runs() -> None:
    rows = pending.run_figure(n=3_000)
    memory, disk, restart = rows
    assert "rocktimer_pending_timers 3,000, after restart 3,000" in memory.notes
    assert "B/timer" in disk.result
    assert restart.result.endswith(" s")
    assert restart.ceiling.startswith("empty store")
    rendered(rows)


@pytest.mark.slow
def test_reclaim_figure_runs() -> None:
    rows = reclaim.run_figure(n=3_000, shape=TINY_PROBE)
    (row,) = rows
    assert row.result.startswith("mean ")
    assert row.ceiling.startswith("fresh store mean ")
    assert "probe received" not in row.notes  # every probe timer came back
    rendered(rows)


@pytest.mark.slow
def test_growth_figure_runs(tmp_path: Path) -> None:
    rows = growth.run_figure(
        levels=(300, 1_000), profile="smoke", out_dir=tmp_path, per_connection=10, shape=TINY_PROBE
    )
    assert len(rows) == 5
    assert all(r.number == "9" for r in rows)
    table = (tmp_path / "growth-smoke.md").read_text()
    assert table.count("\n| ") == 3  # header and two levels
    png = (tmp_path / "growth-smoke.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    rendered(rows)


def test_redis_figure_says_when_redis_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI runs on a clean machine: without redis-server the figure is one explanatory row."""
    monkeypatch.setattr(process, "redis_server_binary", lambda: None)
    rows = redis_alt.run_figure(batches=1, seconds=1, storm_n=1)
    assert [r.result for r in rows] == [redis_alt.NOT_INSTALLED]
    assert "apt-get install redis-server" in rendered(rows)


def _ours_for_smoke() -> redis_alt.Ours:
    """Stand-in results of figures 2-4 (their own smoke tests run the real ones)."""
    lat = lateness.Lateness(spread([1, 2]), spread([2.0, 3.0]), 2, 2, 0, 1e5, "")
    tide = storm.Storm(1_000, 1e5, 0.01, 1_000, 1_000, 1_000, 1e4, 65_000, "")
    return redis_alt.Ours(
        batch=batch.BatchRun(loader.LoadStats(1, 1_000, seconds=0.02), 1e6, "", 2, 1_000),
        lateness=lateness.LatenessRun(lat, spread([0.1]), 300, 1.0, stalls.classify([0.2], [0.0])),
        storm=storm.StormRun(tide, 2e5, 80_000, 10, 80_000),
    )


@pytest.mark.slow
@pytest.mark.skipif(
    process.redis_server_binary() is None,
    reason="redis-server is not installed (apt-get install redis-server); "
    "the figure then prints one explanatory row, tested above",
)
def test_redis_figure_runs() -> None:
    binary = process.redis_server_binary()
    assert binary is not None
    theirs = redis_alt.measure_redis(binary, batches=7, seconds=0.4, storm_n=2_000)
    assert theirs.schedule.n == 2_000  # 7 pipelines of 1000, 5 of them warm-up
    assert theirs.lateness.received == theirs.lateness.expected == 2_000
    assert theirs.storm.distinct == 2_000
    assert theirs.storm.left == 0
    rows = redis_alt.rows(_ours_for_smoke(), theirs)
    assert len(rows) == 3
    assert all(r.met is None for r in rows)  # complete: nothing lost or left
    rendered(rows)


def test_scale_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "BENCH_SCALE",
        "BENCH_STORM_N",
        "BENCH_CONSUME_N",
        "BENCH_NACK_N",
        "BENCH_PENDING_N",
        "BENCH_RECLAIM_N",
        "BENCH_GROWTH_LEVELS",
    ):
        monkeypatch.delenv(var, raising=False)
    assert scale.current() == scale.QUICK
    monkeypatch.setenv("BENCH_SCALE", "full")
    assert scale.current().storm_n == 10_000_000
    assert scale.current().pending_n == 10_000_000
    monkeypatch.setenv("BENCH_STORM_N", "5000")
    assert scale.current().storm_n == 5_000
    monkeypatch.setenv("BENCH_PENDING_N", "2_000_000")
    monkeypatch.setenv("BENCH_GROWTH_LEVELS", "1000,20000")
    s = scale.current()
    assert (s.pending_n, s.growth_levels, s.reclaim_n) == (2_000_000, (1_000, 20_000), 10_000_000)
    monkeypatch.setenv("BENCH_GROWTH_LEVELS", "20000,1000")
    with pytest.raises(SystemExit):
        scale.current()
    monkeypatch.setenv("BENCH_GROWTH_LEVELS", "1000")
    monkeypatch.setenv("BENCH_RECLAIM_N", "lots")
    with pytest.raises(SystemExit):
        scale.current()
    monkeypatch.delenv("BENCH_RECLAIM_N")
    monkeypatch.setenv("BENCH_SCALE", "huge")
    with pytest.raises(SystemExit):
        scale.current()


def test_far_future_bodies_are_bounded_and_spread() -> None:
    before = loader.now_ms()
    bodies = list(loader.far_future_bodies(2_500, seed=1))
    messages = [m for b in bodies for m in orjson.loads(b)["messages"]]
    assert [len(orjson.loads(b)["messages"]) for b in bodies] == [1_000, 1_000, 500]
    dues = [m["deliver_at_ms"] for m in messages]
    assert min(dues) >= before + loader.FAR_START_MS
    assert max(dues) < loader.now_ms() + loader.FAR_START_MS + loader.FAR_SPAN_MS
    assert dues != sorted(dues)  # random order, not an append-only pattern
    assert {len(m["body"]) for m in messages} == {128}


def test_bulk_bodies_are_a_bulk_loads_valid_requests() -> None:
    """What pipeline.bulk_load sends for generated rows: every item one the service takes
    (the loader drops the invalid rows before sending), each with a msg_id, a few rows
    repeated, the generator's topics and mix of times; the same for the same seed."""
    start = loader.now_ms()
    bodies = loader.bulk_bodies(5_000, seed=3, start_ms=start)
    assert bodies == loader.bulk_bodies(5_000, seed=3, start_ms=start)
    assert set(bodies) <= {f"topic-{i}" for i in range(loader.BULK_TOPICS)}
    assert len(bodies) > 3  # skewed, not one topic
    items: list[dict[str, Any]] = []
    for topic, topic_bodies in bodies.items():
        for body in topic_bodies:
            batch_ = SendBatch.model_validate_json(body)  # the full schema takes every item
            for i, msg in enumerate(batch_.messages):
                to_record(topic, msg, start, Settings(), [i], msg.msg_id or "")
            items += orjson.loads(body)["messages"]
        assert all(len(orjson.loads(b)["messages"]) == 1_000 for b in topic_bodies[:-1])
    assert len(items) == 5_000
    assert all("msg_id" in item for item in items)
    repeats = len(items) - len({item["msg_id"] for item in items})
    assert 0.005 * len(items) < repeats < 0.05 * len(items)
    assert any("tag" in item for item in items)
    assert any("properties" in item for item in items)
    dues = [item["deliver_at_ms"] for item in items if "deliver_at_ms" in item]
    soon = [due for due in dues if due < start + 11 * 60_000]  # the bursts
    assert 0.2 * len(items) < len(soon) < 0.5 * len(items)
    assert min(soon) > start  # none due yet: an age (bulk_send --age-s) makes some due
    assert any("delay_ms" in item for item in items)
    assert any("delay_level" in item for item in items)


def test_bulk_send_in_process_times_each_step_of_both_kinds() -> None:
    out = bulk_send.in_process(rounds=2, batches=2, age_ms=600_000)
    assert set(out) == set(bulk_send.KINDS)
    for rounds in out.values():
        assert len(rounds) == 2
        assert all(len(steps) == len(bulk_send.STEPS) and min(steps) > 0 for steps in rounds)
    lines = bulk_send.in_process_summary(out)
    assert [line.split(":")[0] for line in lines] == [*bulk_send.STEPS, "all four"]


@pytest.mark.slow
def test_bulk_send_runs_one_tree_or_two() -> None:
    (side,) = bulk_send.compare([TREE], rounds=2, size=2)
    for kind in bulk_send.KINDS:
        windows = side.windows[kind]
        assert [w.messages for w in windows] == [2_000, 2_000]
        assert all(w.cpu_s > 0 for w in windows)
    lines = bulk_send.summary([side])
    assert lines[-1].startswith(f"{TREE} bulk load ÷ figure 2: CPU a message ")
    sides = bulk_send.compare([TREE, TREE], rounds=1, size=1, age_ms=600_000)
    assert [len(s.windows["bulk load"]) for s in sides] == [1, 1]
    assert bulk_send.summary(sides)[-1].startswith("B ÷ A bulk load: CPU a message ")


def test_stalls_are_chunks_far_slower_than_the_median_grouped_into_bursts() -> None:
    # 1 ms apart, 0.2 ms each, but for two slow runs (5 x and more) 500 ms apart, the first
    # with a gap inside it shorter than the burst gap, and one chunk only 4 x the median.
    at = [float(i) for i in range(2_000)]
    cpu = [0.2] * 2_000
    for i in (100, 101, 102, 150, 600, 601):
        cpu[i] = 2.0
    cpu[1_500] = 0.8
    found = stalls.classify(cpu, at)
    assert found.chunk_ms == 0.2
    assert found.bursts == [stalls.Burst(100.0, 150.0, 4), stalls.Burst(600.0, 601.0, 2)]
    assert found.slowdown == 10.0
    assert found.stalled_share == pytest.approx(51 / 1_999)
    assert found.describe() == "2 bursts in 2 s, 2.6% of the time, longest 50 ms, 10 x slower"
    quiet = stalls.classify([0.2] * 10, [float(i) for i in range(10)])
    assert quiet.bursts == []
    assert quiet.describe().startswith("no stall")


def test_stall_probe_runs() -> None:
    assert stalls.units_per_us() > 0
    measured = stalls.measure(0.2)
    assert 0.15 <= measured.seconds <= 0.3
    assert measured.chunk_ms > 0


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    s = spread(list(reversed(values)))
    assert (s.p50, s.p99, s.max, s.n) == (50, 99, 100, 100)
    assert spread([]).ms() == "no samples"


def test_soak_figure_runs(tmp_path: Path) -> None:
    rows = soak.run_figure(minutes=4, profile="smoke", out_dir=tmp_path)
    assert [r.number for r in rows] == ["15"] * 3
    table = (tmp_path / "soak-smoke.md").read_text()
    assert table.count("\n| ") == 4 + 2  # header, then minutes 0..4
    assert (tmp_path / "soak-smoke.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_stream_figure_runs() -> None:
    rows = stream.run_figure(seconds=1, streams=20, probes=10, rate=300)
    late, memory, probes, machine = rows
    assert machine.figure.startswith("machine CPU stalls")
    assert late.notes.startswith("300/300 received")
    assert late.ceiling.startswith(("Redis Lua poller p50 ", "redis: "))
    assert memory.result.endswith(" MiB")
    assert probes.notes.startswith("10/10 probes arrived (one stream: 10)")
    rendered(rows)


@pytest.mark.slow
def test_deliver_figure_runs() -> None:
    sides = deliver.compare([process.ROOT], {}, rounds=2, rate=300, seconds=1, kinds=deliver.KINDS)
    (side,) = sides
    for kind, messages in (("batch", 2 * 1_000), *((k, 2 * 300) for k in deliver.KINDS)):
        tally = side.tallies[kind]
        assert (tally.rounds, tally.messages) == (2, messages)  # batches: one of 1000 a round
        assert tally.cpu_s >= 0  # in clock ticks: a tiny batch round may take less than one
    for kind in deliver.KINDS:
        tally = side.tallies[kind]
        assert tally.incomplete == 0
        assert len(tally.late) == 600
        assert tally.counters["batches"] > 0
        assert tally.counters["fsyncs"] > 0
        assert sum(tally.stages.values()) > 0
        assert sum(tally.sleeps.values()) > 0  # the threads' waits, from /proc
        assert len(side.ratios[kind]) <= 2
    lines = deliver.summary(sides, None)
    assert any("by thread" in line for line in lines)
    rows = deliver.rows(sides, "redis: not installed")
    assert [r.number for r in rows] == ["19", "19"]
    rendered(rows)
    by_rate = deliver.by_rate({300: sides, 600: sides})  # the same rounds twice: no split
    assert len(by_rate) == 2 * len(deliver.KINDS)
    assert not any("a writer batch" in line for line in by_rate)


def test_delivery_cost_splits_into_a_part_a_message_and_a_part_a_batch() -> None:
    # 12 µs a message and 450 µs a batch, at three batch rates
    points = [(x, 12 + 450 * x) for x in (0.03, 0.1, 0.3)]
    split = deliver.split_cost(points)
    assert split is not None
    assert split == pytest.approx((12, 450))
    assert deliver.split_cost(points[:1]) is None
    assert deliver.split_cost([(0.1, 50), (0.1, 60)]) is None  # one batch rate: no slope


TREE = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ab_runs_both_modes() -> None:
    # Batches: a window is a number of batches, each stored whatever the machine's load.
    a, b, ratios = ab.compare(
        TREE, TREE, env_a={"ROCKTIMER_EVENTS": "false"}, env_b={}, mode="batch", rounds=2, size=2
    )
    assert len(ratios) == 2
    assert (a.sent, b.sent, a.empty, b.empty) == (4_000, 4_000, 0, 0)
    assert a.cpu_s > 0
    assert ab.summary(a, b, ratios, 2, "msg/s")[-1].startswith("B ÷ A ")
    # Single sends: a window is a span of time, which a busy machine may answer nothing in;
    # such a round is left out on both sides, never divided by.
    a, b, ratios = ab.compare(TREE, TREE, env_a={}, env_b={}, mode="single", rounds=2, size=20)
    assert len(ratios) == len(a.rates) == len(b.rates) <= 2
    assert all(rate > 0 for rate in [*ratios, *a.rates, *b.rates])
    assert len(ratios) + max(a.empty, b.empty) <= 2 <= len(ratios) + a.empty + b.empty
    assert ab.summary(a, b, ratios, 2, "req/s")[-1].startswith("B ÷ A")


@pytest.mark.slow
def test_ab_round_without_replies_gives_no_ratio() -> None:
    """Zero-length windows get no reply on any machine: every round is left out, and the
    summary says so instead of dividing by zero."""
    a, b, ratios = ab.compare(TREE, TREE, env_a={}, env_b={}, mode="single", rounds=2, size=0)
    assert (ratios, a.empty, b.empty, a.sent, b.sent) == ([], 2, 2, 0, 0)
    assert ab.summary(a, b, ratios, 2, "req/s") == [
        "A 0 req/s, server CPU 0.0 µs a message",
        "B 0 req/s, server CPU 0.0 µs a message",
        "B ÷ A: no round got replies on both sides (windows without a reply: A 2, B 2); no ratio",
    ]


def test_the_in_process_split_measures_each_step_of_a_delivery_and_a_batch_send() -> None:
    steps, send_us = deliver.in_process(sizes=(1, 4), rounds=6)
    assert [s.size for s in steps] == [1, 4]
    for s in steps:
        assert list(s.us) == list(deliver.IN_PROCESS_STEPS)
        # Each round moved, served and acked its messages (or in_process raised), on this
        # thread: CPU time of its own, whatever the machine's load
        assert s.us["move"] > 0
        assert s.us["ack"] > 0
    assert send_us > 0
    lines = deliver.in_process_lines(steps, send_us)
    assert lines[0].startswith("in process: a batch send of 1000 ")
    assert any(line.startswith("  all: ~ ") for line in lines)  # two sizes: a split


def test_the_in_process_rounds_run_again_on_engines_whose_wal_is_recycled() -> None:
    steps, _ = deliver.in_process(sizes=(1, 4), rounds=4, rolled=True)
    assert [(s.size, s.wal) for s in steps] == [(1, ""), (4, ""), (1, "recycled"), (4, "recycled")]
    lines = deliver.in_process_lines(steps, 5.0)
    assert " the WAL recycled:" in lines
    assert sum(line.startswith("  all: ~ ") for line in lines) == 2


def test_a_rolled_store_writes_its_wal_over_a_recycled_file(tmp_path: Path) -> None:
    store = RocksStore(str(tmp_path / "db"))
    try:
        deliver_floor.roll_wal(store)
        store.write([Put(CF.META, b"k", b"v")], sync=False)
        store.sync_wal()
        sizes = [p.stat().st_size for p in (tmp_path / "db").glob("*.log")]
        assert max(sizes) >= deliver_floor.ROLLED_WAL_BYTES  # one small record, a file that long
        assert store.scan(CF.TIMERS, b"", b"\xff" * 16, 10) == []  # what it wrote is gone
    finally:
        store.close()


def test_the_floor_times_a_rounds_real_batches_fsync_and_hand_off() -> None:
    (floor,) = deliver_floor.measure(sizes=(3,), reps=4)
    # The batches were captured from a real round of 3: the move writes at least a log
    # entry and an index update a message, and the merged batch holds both batches' keys
    assert floor.move_keys >= 2 * 3
    assert floor.ack_keys >= 3
    assert all(us > 0 for us in (floor.move_us, floor.ack_us, floor.both_us, floor.send_us))
    assert floor.fsync_wall_us > 0
    assert floor.handoff_us > 0
    assert floor.two_commits - floor.one_commit == pytest.approx(
        floor.move_us + floor.ack_us - floor.both_us
    )
    lines = deliver_floor.lines([floor], deliver.GOAL_RATIO)
    assert lines[0].startswith("floor of a round of 3 ")
    assert sum("a batch send (goal <= 3 x)" in line for line in lines) == 3  # (a), (b), (c)
    assert floor.wal_appended_us > 0
    assert floor.wal_recycled_us > 0
