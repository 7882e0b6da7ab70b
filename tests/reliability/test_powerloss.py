"""Power cuts under the service (tools/powerloss.py says what each proves):
what it makes durable itself — its data dir, the event log's directories and segments —
survives a cut, and a few cuts of the real server under load lose nothing acknowledged.

The loop's seed is random per run and printed; POWERLOSS_SEED=n replays a failing one.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
from pathlib import Path

import pyarrow as pa
import pytest

from storage.errors import StorageError
from storage.event_table import SCHEMA
from storage.store import CF, Put, RocksStore
from tests.reliability.conftest import power_cut, require_fuse
from tools import powerloss
from tools.powercut.mount import PowerCut
from workers import segments

CI_CUTS = 3


def test_the_data_dir_and_a_synced_write_survive_a_power_cut(fs: PowerCut) -> None:
    data = fs.mount_point / "srv" / "data"  # neither directory exists yet
    store = RocksStore(data)
    store.write([Put(CF.META, b"k", b"v")], sync=True)
    fs.freeze()
    with contextlib.suppress(StorageError):  # its disk is gone: nothing more is written
        store.close()
    fs.cut(torn=False, seed=0)
    fs.mount()
    store = RocksStore(data)
    try:
        assert store.get(CF.META, b"k") == b"v"
    finally:
        store.close()


@pytest.mark.parametrize("torn", [False, True])
def test_writes_to_a_recycled_wal_survive_a_power_cut_up_to_the_last_sync(
    fs: PowerCut, torn: bool
) -> None:
    """The store writes its WAL over an obsolete one (storage/store.py, RECYCLED_WALS):
    after a cut, what was synced in it is there, what was not is a prefix of the rest,
    and the old records behind are never replayed."""
    data = fs.mount_point / "data"
    store = RocksStore(data)
    value = b"v" * 1024
    for roll in range(3):  # each flush of the memtable starts the next WAL
        store.write(
            [Put(CF.META, b"roll-%d-%d" % (roll, i), value) for i in range(512)], sync=False
        )
        store.compact(CF.META, None, None)
    for i in range(20):
        store.write([Put(CF.TIMERS, i.to_bytes(4, "big"), b"synced")], sync=False)
    store.sync_wal()
    for i in range(20, 40):
        store.write([Put(CF.TIMERS, i.to_bytes(4, "big"), b"unsynced")], sync=False)
    fs.freeze()
    with contextlib.suppress(StorageError):
        store.close()
    fs.cut(torn=torn, seed=7)
    fs.mount()
    store = RocksStore(data)
    try:
        got = [store.get(CF.TIMERS, i.to_bytes(4, "big")) for i in range(40)]
        assert got[:20] == [b"synced"] * 20
        kept = got[20:]
        assert kept == [b"unsynced"] * kept.count(b"unsynced") + [None] * kept.count(None)
        assert store.get(CF.META, b"roll-2-511") == value
        assert len(store.scan(CF.TIMERS, b"", b"\xff" * 8, 100)) == 20 + kept.count(b"unsynced")
    finally:
        store.close()


def test_a_sealed_segment_and_its_directories_survive_a_power_cut(fs: PowerCut) -> None:
    data = fs.mount_point / "data"
    RocksStore(data).close()  # the data dir, made durable; events/ is not there yet
    root = str(data / "events")
    at = 1_700_000_000_000
    rows = [
        {"seq": i, "event_time_ms": at + i, "kind": "scheduled", "topic": "t", "msg_id": f"m{i}"}
        for i in range(5)
    ]
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    day = segments.day_of(at)
    written = segments.write(root, table, day, 0, 4)
    power_cut(fs)
    assert segments.segments(root) == [written]
    assert not [name for name in os.listdir(os.path.dirname(written.path)) if name[0] == "."]


@pytest.mark.slow
def test_nothing_acknowledged_is_lost_across_power_cuts(tmp_path: Path) -> None:
    require_fuse()
    seed = int(os.environ.get("POWERLOSS_SEED") or random.SystemRandom().randrange(2**32))
    out = io.StringIO()
    summary = powerloss.run(CI_CUTS, seed, torn_chance=0.5, work=tmp_path / "work", out=out)
    report = f"{out.getvalue()}{summary.report()}"
    print(report)
    assert summary.ok, report
    stats = summary.stats
    assert stats["cuts"] == CI_CUTS, report
    # The run did what it claims: sends lost with the power and sent again, deliveries,
    # cancels, acks, and an event log read back against the store.
    for counter in ("acknowledged", "lost_missing", "cancelled", "delivered", "audit_acked"):
        assert stats[counter] > 0, f"{counter} is 0: the load did not do what it should\n{report}"
    assert stats["events"] > stats["delivered"], report
