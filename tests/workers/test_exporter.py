"""The exporter on a real engine and store: segments hold exactly the events the store
held, appear only whole, are redone under the same name after a crash, and expire."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from storage.errors import WriterStopped
from storage.event_table import decode
from storage.store import CF
from tests.workers.conftest import EngineFactory
from tests.workers.support import record, run, wait_until
from tests.workers.test_events import END, NEVER, S, cf_events, quiet_engine
from workers import exporter as exporter_module
from workers import sealer, segments
from workers.clock import FakeClock
from workers.engine import Engine
from workers.exporter import Exporter

DAY = segments.DAY_MS


def send_batches(engine: Engine, clock: FakeClock, batches: int, size: int, tag: str) -> None:
    for b in range(batches):
        recs = [record("t", f"{tag}-{b}-{i}", clock.now_ms() + 3_600 * S) for i in range(size)]
        run(engine.send_batch(recs))


def exporter(engine: Engine, clock: FakeClock, rows: int = 100) -> Exporter:
    """An exporter beside the engine's, sealing in its own thread: the crash tests below
    break os.replace or segments.write in this process (a child process is tested in
    tests/workers/test_sealer.py)."""
    return Exporter(
        engine.store,
        engine.writer,
        clock,
        seal_ms=NEVER,
        retention_ms=DAY,
        segment_rows=rows,
        in_process=False,
    )


def sealed(engine: Engine) -> list[dict[str, Any]]:
    root = os.path.join(engine.store.path, "events")
    rows: list[dict[str, Any]] = []
    for seg in segments.segments(root):
        table = pq.read_table(seg.path)
        # Each row also names the engine's partition (0: a data dir of one partition).
        assert set(table.column("partition").to_pylist()) == {engine.config.partition}
        part = table.drop_columns(["partition"]).to_pylist()
        assert [r["seq"] for r in part] == list(range(seg.first, seg.last + 1)), seg
        rows.extend(part)
    return rows


def files(engine: Engine) -> list[str]:
    root = Path(engine.store.path) / "events"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_segments_hold_exactly_the_events_of_the_store(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = quiet_engine(make_engine)
    send_batches(engine, clock, batches=7, size=40, tag="a")
    expected = cf_events(engine.store)
    assert len(expected) == 280
    assert exporter(engine, clock).export() == 280
    assert cf_events(engine.store) == [], "the sealed range is deleted"
    assert sealed(engine) == expected
    day = segments.day_of(clock.now_ms())
    # Whole batches of 40, at most 100 events each; no hidden file left.
    assert files(engine) == sorted(
        f"date={day}/part-{a}-{b}.parquet" for a, b in [(0, 79), (80, 159), (160, 239), (240, 279)]
    )
    schema = pq.read_schema(os.path.join(engine.store.path, "events", files(engine)[0]))
    assert [(f.name, str(f.type)) for f in schema] == [
        ("seq", "int64"),
        ("event_time_ms", "int64"),
        ("kind", "string"),
        ("topic", "string"),
        ("msg_id", "string"),
        ("group", "string"),
        ("attempt", "int32"),
        ("deliver_at_ms", "int64"),
        ("created_at_ms", "int64"),
        ("tag", "string"),
        ("partition", "int32"),
    ]
    meta = pq.read_metadata(os.path.join(engine.store.path, "events", files(engine)[0]))
    assert meta.row_group(0).column(0).compression == "ZSTD"


def test_a_crash_before_the_rename_leaves_only_a_hidden_file(
    make_engine: EngineFactory, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = quiet_engine(make_engine)
    send_batches(engine, clock, batches=1, size=10, tag="a")
    expected = cf_events(engine.store)

    def crash(src: str, dst: str) -> None:
        raise OSError("killed before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="rename"):
        exporter(engine, clock).export()
    day = segments.day_of(clock.now_ms())
    hidden = f"date={day}/.part-0-9.parquet.{os.getpid()}"  # this process's own
    assert files(engine) == [hidden], "invisible to Spark"
    assert pq.read_table(Path(engine.store.path) / "events" / files(engine)[0]).num_rows == 10
    assert cf_events(engine.store) == expected, "nothing deleted before the rename"
    monkeypatch.undo()
    assert exporter(engine, clock).export() == 10  # a restarted exporter
    assert files(engine) == [f"date={day}/part-0-9.parquet"]
    assert sealed(engine) == expected


def test_a_crash_between_seal_and_delete_reseals_the_same_file(
    make_engine: EngineFactory, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = quiet_engine(make_engine)
    send_batches(engine, clock, batches=3, size=30, tag="a")
    expected = cf_events(engine.store)
    crashed = exporter(engine, clock, rows=60)

    def killed(*args: Any, **kwargs: Any) -> None:
        raise WriterStopped("killed before the delete")

    monkeypatch.setattr(crashed.writer, "call", killed)
    with pytest.raises(WriterStopped):
        crashed.export()
    monkeypatch.undo()
    day = segments.day_of(clock.now_ms())
    first = Path(engine.store.path) / "events" / f"date={day}" / "part-0-59.parquet"
    before = first.read_bytes()
    assert cf_events(engine.store) == expected, "the sealed range is still in the store"
    # More events arrive; the next export must not seal a longer range from seq 0.
    send_batches(engine, clock, batches=2, size=30, tag="b")
    expected = cf_events(engine.store)
    assert exporter(engine, clock, rows=60).export() == 150
    assert first.read_bytes() == before, "the same file, the same rows"
    assert files(engine) == [
        f"date={day}/part-0-59.parquet",
        f"date={day}/part-120-149.parquet",
        f"date={day}/part-60-119.parquet",
    ]
    assert sealed(engine) == expected, "every event once"
    assert cf_events(engine.store) == []


def test_a_round_seals_what_it_found_and_leaves_what_arrives_meanwhile(
    make_engine: EngineFactory, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under a steady load, chasing the events that arrived while a segment was written
    # sealed tiny segments back to back, never ending the round.
    engine = quiet_engine(make_engine)
    send_batches(engine, clock, batches=3, size=30, tag="a")
    write = segments.write
    arrived: list[int] = []

    def write_while_events_arrive(*args: Any) -> segments.Segment:
        if len(arrived) == 3:
            pytest.fail("the round chases the events that arrive while it writes")
        send_batches(engine, clock, batches=1, size=30, tag=f"b{len(arrived)}")
        arrived.append(30)
        return write(*args)

    monkeypatch.setattr(segments, "write", write_while_events_arrive)
    exp = exporter(engine, clock, rows=60)
    assert exp.export() == 90  # two segments (60 + 30): what was there at the start
    assert len(arrived) == 2
    assert len(cf_events(engine.store)) == 60, "what came meanwhile waits for the next round"
    monkeypatch.undo()
    assert exp.export() == 60
    assert cf_events(engine.store) == []


def test_segments_split_at_midnight_and_expire_after_the_retention(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    midnight = (clock.now_ms() // DAY + 1) * DAY
    clock.set(midnight - S)
    engine = quiet_engine(make_engine)
    send_batches(engine, clock, batches=1, size=5, tag="late")
    clock.set(midnight + S)
    send_batches(engine, clock, batches=1, size=5, tag="early")
    exp = exporter(engine, clock)
    assert exp.export() == 10
    old, new = segments.day_of(midnight - S), segments.day_of(midnight)
    assert files(engine) == [f"date={old}/part-0-4.parquet", f"date={new}/part-5-9.parquet"]
    clock.set(midnight - S + DAY)  # the retention (a day) of the older segment is not over
    assert exp.expire() == 0
    clock.advance(1)  # ... now it is; the newer one, 2 s younger, stays
    assert exp.expire() == 1
    assert files(engine) == [f"date={new}/part-5-9.parquet"]
    clock.set(midnight + S + DAY + 1)
    assert exp.expire() == 1
    assert files(engine) == []


def test_the_exporter_seals_every_seal_interval(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = make_engine(events_seal_ms=10 * S)
    engine.start()
    wait_until(lambda: engine.exporter.alive, what="exporter thread")
    run(engine.send(record("t", "m", clock.now_ms() + 3_600 * S)))
    clock.advance(10 * S)
    wait_until(lambda: engine.exporter.exported == 1, what="the seal")
    assert engine.store.scan(CF.EVENTS, b"", END, 10) == []
    assert [r["msg_id"] for r in sealed(engine)] == ["m"]


def test_with_the_event_log_off_there_is_no_exporter(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = make_engine(events=False)
    engine.start()
    run(engine.send(record("t", "m", clock.now_ms())))
    assert not engine.exporter.alive
    assert engine.store.scan(CF.EVENTS, b"", END, 10) == []


def test_a_segment_decoded_in_slices_equals_it_decoded_at_once(
    make_engine: EngineFactory, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slices of ~30 events, cut only between values (batches of 40 and single sends).
    engine = quiet_engine(make_engine)
    send_batches(engine, clock, batches=5, size=40, tag="a")
    for i in range(17):
        run(engine.send(record("t", f"one-{i}", clock.now_ms() + 3_600 * S)))
    entries = engine.store.scan(CF.EVENTS, b"", END, 10**9)
    gave_way: list[int] = []
    monkeypatch.setattr(sealer, "DECODE_SLICE", 30)
    sliced = sealer.decode(entries, lambda: gave_way.append(1))
    assert sliced.num_rows == 217
    assert len(sliced.column(0).chunks) > 5
    assert len(gave_way) == len(sliced.column(0).chunks)
    assert sliced.to_pylist() == decode(entries).to_pylist()
    monkeypatch.setattr(sealer, "DECODE_SLICE", 1)
    assert sealer.decode(entries, lambda: None).to_pylist() == cf_events(engine.store)
    assert sealer.decode([], lambda: None).num_rows == 0


def test_a_round_waits_while_a_storm_drains_but_not_longer_than_its_bound(
    make_engine: EngineFactory, clock: FakeClock
) -> None:
    engine = quiet_engine(make_engine)
    send_batches(engine, clock, batches=2, size=10, tag="a")
    lag = [exporter_module.DEFER_LAG_MS + 1]  # ms the deliveries are behind
    ex = Exporter(
        engine.store,
        engine.writer,
        clock,
        seal_ms=NEVER,
        retention_ms=DAY,
        behind=lambda: lag[0],
    )
    try:  # its rounds run here, on a thread of the test's (not its own, which also seals)
        round_ = threading.Thread(target=ex.tick)
        round_.start()
        round_.join(0.3)
        assert round_.is_alive()  # waiting for the deliveries
        assert files(engine) == []
        lag[0] = 0  # caught up
        round_.join(10)
        assert not round_.is_alive()
        assert len(sealed(engine)) == 20

        send_batches(engine, clock, batches=1, size=5, tag="b")
        lag[0] = 10**9  # behind for good: the round waits DEFER_MAX_MS of the clock, then seals
        round_ = threading.Thread(target=ex.tick)
        round_.start()
        round_.join(0.2)
        assert round_.is_alive()
        clock.advance(exporter_module.DEFER_MAX_MS)
        round_.join(10)
        assert not round_.is_alive()
        assert len(sealed(engine)) == 25
        assert ex.deferred_ms >= exporter_module.DEFER_MAX_MS
    finally:
        lag[0] = 0
        round_.join(10)
        ex.sealer.close()  # its child process (never started as a thread: no stop)
