"""RocksStore over a real RocksDB in tmp_path: atomic batches, scan bounds, reopen, compaction."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import store as store_mod
from storage.errors import StorageError, StoreClosedError
from storage.store import CF, Delete, DeleteRange, Put, RocksStore


def k(i: int) -> bytes:
    return i.to_bytes(4, "big")


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "db")


@pytest.fixture
def store(path: str) -> Iterator[RocksStore]:
    s = RocksStore(path)
    yield s
    s.close()


def all_keys(store: RocksStore, cf: str) -> list[bytes]:
    return [key for key, _ in store.scan(cf, b"", b"\xff" * 16, 10**9)]


def test_write_applies_puts_deletes_and_range_deletes_across_cfs_together(
    store: RocksStore,
) -> None:
    store.write([Put(CF.TIMERS, k(i), b"t") for i in range(10)], sync=True)
    store.write([Put(CF.META, b"gone", b"1"), Put(CF.META, b"stays", b"1")], sync=True)
    store.write(
        [
            DeleteRange(CF.TIMERS, k(2), k(6)),
            Delete(CF.META, b"gone"),
            Put(CF.LOGS, b"log", b"entry"),
            Put(CF.META, b"stays", b"2"),
        ],
        sync=True,
    )
    assert all_keys(store, CF.TIMERS) == [k(i) for i in (0, 1, 6, 7, 8, 9)]
    assert store.get(CF.META, b"gone") is None
    assert store.get(CF.META, b"stays") == b"2"
    assert store.get(CF.LOGS, b"log") == b"entry"


def test_put_after_range_delete_in_one_batch_survives(store: RocksStore) -> None:
    # Txn.commit relies on this: range deletes first, then each key's final value.
    store.write([Put(CF.TIMERS, k(i), b"old") for i in range(5)], sync=False)
    store.write([DeleteRange(CF.TIMERS, k(0), k(5)), Put(CF.TIMERS, k(3), b"new")], sync=False)
    assert store.scan(CF.TIMERS, b"", k(100), 100) == [(k(3), b"new")]


def test_a_batch_that_cannot_be_built_writes_nothing(store: RocksStore) -> None:
    bad = Put(CF.META, b"b", "not bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bytes"):
        store.write([Put(CF.META, b"a", b"1"), bad], sync=True)
    assert store.get(CF.META, b"a") is None


def test_column_families_are_separate_keyspaces(store: RocksStore) -> None:
    store.write([Put(CF.TIMERS, b"same", b"timer"), Put(CF.LOGS, b"same", b"log")], sync=False)
    assert store.get(CF.TIMERS, b"same") == b"timer"
    assert store.get(CF.LOGS, b"same") == b"log"
    assert store.get(CF.MESSAGES, b"same") is None
    store.write([Delete(CF.TIMERS, b"same")], sync=False)
    assert store.get(CF.LOGS, b"same") == b"log"


def test_scan_start_inclusive_end_exclusive_and_limit(store: RocksStore) -> None:
    store.write([Put(CF.TIMERS, k(i), str(i).encode()) for i in range(0, 20, 2)], sync=False)
    assert store.scan(CF.TIMERS, k(4), k(10), 100) == [(k(4), b"4"), (k(6), b"6"), (k(8), b"8")]
    assert [key for key, _ in store.scan(CF.TIMERS, k(3), k(11), 100)] == [k(4), k(6), k(8), k(10)]
    assert [key for key, _ in store.scan(CF.TIMERS, k(0), k(100), 3)] == [k(0), k(2), k(4)]
    assert store.scan(CF.TIMERS, k(0), k(100), 0) == []
    assert store.scan(CF.TIMERS, k(5), k(6), 10) == []
    assert store.scan(CF.TIMERS, k(50), k(100), 10) == []
    assert store.first_key(CF.TIMERS, k(5), k(100)) == k(6)
    assert store.first_key(CF.TIMERS, k(19), k(100)) is None
    assert store.last_key(CF.TIMERS, k(0), k(5)) == k(4)  # the last at or before
    assert store.last_key(CF.TIMERS, k(0), k(6)) == k(6)
    assert store.last_key(CF.TIMERS, k(5), k(5)) is None  # none from start on
    assert store.last_key(CF.LOGS, k(0), k(100)) is None  # another column family's keys


def test_scan_skips_deleted_keys(store: RocksStore) -> None:
    store.write([Put(CF.TIMERS, k(i), b"v") for i in range(100)], sync=False)
    store.write([DeleteRange(CF.TIMERS, k(0), k(90)), Delete(CF.TIMERS, k(95))], sync=False)
    assert all_keys(store, CF.TIMERS) == [k(i) for i in (90, 91, 92, 93, 94, 96, 97, 98, 99)]


def test_get_many_keeps_order_and_gives_none_for_missing(store: RocksStore) -> None:
    store.write([Put(CF.MESSAGES, b"a", b"1"), Put(CF.MESSAGES, b"c", b"3")], sync=False)
    assert store.get_many(CF.MESSAGES, [b"c", b"b", b"a", b"z"]) == [b"3", None, b"1", None]
    assert store.get_many(CF.MESSAGES, [b"nope"]) == [None]
    assert store.get_many(CF.MESSAGES, []) == []


def _cf_options(path: str) -> dict[str, dict[str, str]]:
    """Each CF's options as RocksDB wrote them in the newest OPTIONS file of ``path``."""
    newest = max(Path(path).glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    out: dict[str, dict[str, str]] = {}
    section: dict[str, str] | None = None
    for raw in newest.read_text().splitlines():
        line = raw.strip()
        if line.startswith("[CFOptions "):
            section = out.setdefault(line.split('"')[1], {})
        elif line.startswith("["):
            section = None
        elif section is not None and "=" in line:
            name, _, value = line.partition("=")
            section[name] = value
    return out


def test_the_index_memtable_has_a_bloom_filter_and_only_it(store: RocksStore, path: str) -> None:
    """A send looks its msg_id up in the index first: a new id, absent, skips the memtable's
    search through a bloom filter of whole keys; the other CFs are scanned, not read by
    key, and keep their memtables lean. Absent and present keys read right either way."""
    options = _cf_options(path)
    assert set(options) == {*CF.ALL, "default"}
    for cf, opts in options.items():
        bloom = float(opts["memtable_prefix_bloom_size_ratio"])
        whole = opts["memtable_whole_key_filtering"] == "true"
        assert (bloom, whole) == ((0.02, True) if cf == CF.MESSAGES else (0.0, False)), cf
    store.write([Put(CF.MESSAGES, k(i), k(i)) for i in range(0, 2000, 2)], sync=False)
    assert store.get_many(CF.MESSAGES, [k(i) for i in range(2000)]) == [
        k(i) if i % 2 == 0 else None for i in range(2000)
    ]


def test_data_survives_close_and_reopen(path: str) -> None:
    first = RocksStore(path)
    first.write([Put(cf, b"key-" + cf.encode(), cf.encode()) for cf in CF.ALL], sync=True)
    first.write([Put(CF.TIMERS, k(i), b"v") for i in range(1000)], sync=False)
    first.write([DeleteRange(CF.TIMERS, k(0), k(500))], sync=False)
    first.close()
    second = RocksStore(path)
    try:
        for cf in CF.ALL:
            assert second.get(cf, b"key-" + cf.encode()) == cf.encode()
        assert all_keys(second, CF.TIMERS)[:2] == [k(500), k(501)]
        assert len(all_keys(second, CF.TIMERS)) == 500 + 1  # + the "key-timers" key
    finally:
        second.close()


def test_closed_store_refuses_calls_and_closes_twice(store: RocksStore) -> None:
    store.close()
    store.close()
    with pytest.raises(StoreClosedError):
        store.get(CF.META, b"a")
    with pytest.raises(StoreClosedError):
        store.write([Put(CF.META, b"a", b"1")], sync=True)
    with pytest.raises(StoreClosedError):
        store.scan(CF.META, b"", b"\xff", 1)


def test_second_open_of_the_same_directory_is_a_storage_error(store: RocksStore, path: str) -> None:
    with pytest.raises(StorageError, match="cannot open store"):
        RocksStore(path)


def test_compact_after_delete_range_drops_the_range_from_disk(store: RocksStore) -> None:
    n = 20_000
    store.write([Put(CF.TIMERS, k(i), b"v" * 100) for i in range(n)], sync=False)
    store.compact(CF.TIMERS, None, None)
    size_before = store.property_int(CF.TIMERS, "rocksdb.total-sst-files-size")
    assert store.property_int(CF.TIMERS, "rocksdb.estimate-num-keys") == n

    store.write([DeleteRange(CF.TIMERS, k(0), k(n - 100))], sync=False)
    store.compact(CF.TIMERS, None, k(n - 100))

    assert store.property_int(CF.TIMERS, "rocksdb.estimate-num-keys") == 100
    assert store.property_int(CF.TIMERS, "rocksdb.total-sst-files-size") < size_before / 10
    assert all_keys(store, CF.TIMERS) == [k(i) for i in range(n - 100, n)]


def test_every_column_family_shares_one_bounded_block_cache(store: RocksStore) -> None:
    # RocksDB's default gives each CF its own 32 MiB cache: seven of them filled with
    # blocks of deleted SSTs and raised RSS for hours (bench figure 15).
    for cf in CF.ALL:
        assert store.property_int(cf, "rocksdb.block-cache-capacity") == store_mod.BLOCK_CACHE_BYTES
    store.write([Put(CF.LOGS, k(i), b"x" * 100) for i in range(2000)], sync=True)
    store.compact(CF.LOGS, None, None)  # to an SST, so that reads go through the cache
    assert len(all_keys(store, CF.LOGS)) == 2000
    usage = [store.property_int(cf, "rocksdb.block-cache-usage") for cf in CF.ALL]
    assert usage[0] > 0
    assert usage == [usage[0]] * len(CF.ALL)  # one cache: every CF sees the logs' blocks


def test_memory_is_reported_by_kind_and_the_cache_fills_from_reads(path: str) -> None:
    store = RocksStore(path)
    empty = store.memory()
    store.write([Put(CF.LOGS, k(i), b"x" * 100) for i in range(2000)], sync=True)
    assert store.memory()["memtables"] > empty["memtables"]
    store.compact(CF.LOGS, None, None)  # out of the memtable, into an SST read through the cache
    assert len(all_keys(store, CF.LOGS)) == 2000
    assert store.memory()["block_cache"] > empty["block_cache"]
    store.reopen()
    assert store.memory()["memtables"] >= 0  # the new handles
    store._cfs = {}  # as mid-reopen: a scrape then finds nothing, and no error
    assert store.memory() == {}
    store.close()
    assert store.memory() == {}


def test_the_info_log_rolls_and_old_ones_are_capped(path: str) -> None:
    RocksStore(path).close()
    options = max(Path(path).glob("OPTIONS-*"), key=lambda p: p.stat().st_mtime).read_text()
    assert f"max_log_file_size={store_mod.MAX_LOG_FILE_BYTES}\n" in options
    assert f"keep_log_file_num={store_mod.KEEP_LOG_FILES}\n" in options


def wal_sizes(path: str) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in Path(path).glob("*.log")}


def test_a_rolled_wal_is_written_over_and_what_it_gets_is_replayed(path: str) -> None:
    """An obsolete WAL file is kept and written over as the next one (a file that does not
    grow: its fsync has no size to commit); a reopen replays what was written to it and
    stops at the old records behind."""
    first = RocksStore(path)
    value = b"v" * 1024
    for roll in range(3):  # each flush of the memtable starts the next WAL
        first.write(
            [Put(CF.META, b"roll-%d-%d" % (roll, i), value) for i in range(2048)], sync=False
        )
        first.compact(CF.META, None, None)
    first.write([Put(CF.TIMERS, k(i), b"after") for i in range(10)], sync=False)
    first.sync_wal()
    # The live WAL holds ten small records, in a file of the old one's length
    assert max(wal_sizes(path).values()) >= 1024 * 1024
    first.write([Put(CF.TIMERS, k(i), b"after-2") for i in range(5)], sync=False)
    first.sync_wal()
    first.close()  # the memtables are not flushed: a reopen replays the recycled WAL
    second = RocksStore(path)
    try:
        got = [second.get(CF.TIMERS, k(i)) for i in range(10)]
        assert got == [b"after-2"] * 5 + [b"after"] * 5
        assert all_keys(second, CF.TIMERS) == [k(i) for i in range(10)]  # no old record
        assert second.get(CF.META, b"roll-2-2047") == value
    finally:
        second.close()
