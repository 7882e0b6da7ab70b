"""RocksStore: the one RocksDB database, its column families and the few calls we need."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Final, NamedTuple, cast

from rocksdict import (
    BlockBasedOptions,
    Cache,
    Checkpoint,
    DBCompressionType,
    Options,
    Rdict,
    RdictIter,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from storage import dirs
from storage.errors import StorageError, StoreClosedError

# Every number that shapes RocksDB, with why.
WRITE_BUFFER_BYTES = 64 * 1024 * 1024  # memtable; a 1M-timer storm fits in a few flushes
BACKGROUND_JOBS = 2  # the machine has two cores; flush + compaction run beside the writer
BYTES_PER_SYNC = 1024 * 1024  # smooth SST writes instead of one burst at the end
MAX_TOTAL_WAL_BYTES = 128 * 1024 * 1024  # flush quiet CFs (meta) so WAL replay stays short:
# without it meta's memtable pinned ~3 GiB of WAL at 10M timers and a restart took 6 s
RECYCLED_WALS = 1  # an obsolete WAL file is kept and written over as the next one: an
# fsync of a file that does not grow has no size to commit, a third to two fifths less CPU
# each and less wall time (bench.deliver --floor). Its records carry their log's number, so
# recovery stops at the old ones (point-in-time recovery with recycling: RocksDB >= 9.1)
SECRET_BYTES = 32  # store secrets (receipt MACs): HMAC-SHA256's own key size
BLOOM_BITS_PER_KEY = 10  # ~1% false positives: a send of a new msg_id skips SSTs it isn't in
BLOCK_CACHE_BYTES = 64 * 1024 * 1024  # one LRU of data blocks for every CF: RocksDB's
# default is a 32 MiB cache per CF, 7 of them, which filled with blocks of long-deleted
# SSTs and raised RSS by ~1.5 MiB a minute for hours
MAX_LOG_FILE_BYTES = 4 * 1024 * 1024  # RocksDB's info LOG rolls at this size; by default it
KEEP_LOG_FILES = 3  # grows for as long as the process runs, and every open keeps one more
MEMTABLE_BLOOM_RATIO = 0.02  # of the memtable, for a bloom filter of its whole keys (~15
# bits a key of the index): a send looks its client msg_id up first, and a new id, absent,
# then skips each memtable's search (a bulk load's multi-get: 0.26 µs a key with it, 0.65
# without)


MEMTABLES = "rocksdb.size-all-mem-tables"
BLOCK_CACHE = "rocksdb.block-cache-usage"
TABLE_READERS = "rocksdb.estimate-table-readers-mem"


class CF:
    """Column family names (see architecture.md, Storage).

    Plain strings, not an Enum: they key dicts on the writer's hot path, where an Enum's
    Python-level ``__hash__`` showed up in the storm profile.
    """

    TIMERS: Final = "timers"
    MESSAGES: Final = "messages"
    LOGS: Final = "logs"
    INFLIGHT: Final = "inflight"
    META: Final = "meta"
    DEAD: Final = "dead"  # dead letters per (topic, group), oldest first
    EVENTS: Final = "events"  # the event log until exported (storage/events.py)
    ALL: Final = (TIMERS, MESSAGES, LOGS, INFLIGHT, META, DEAD, EVENTS)


POINT_READ_CFS = frozenset({CF.MESSAGES})  # read by key: their memtables get a bloom filter


class Put(NamedTuple):
    cf: str
    key: bytes
    value: bytes


class Delete(NamedTuple):
    cf: str
    key: bytes


class DeleteRange(NamedTuple):
    cf: str
    begin: bytes
    end: bytes


WriteOp = Put | Delete | DeleteRange


def _options(
    block_cache: Cache | None = None, memory_share: int = 1, *, point_reads: bool = False
) -> Options:
    """The options of the DB and of each CF; pass them all one ``block_cache`` (a fresh one
    of BLOCK_CACHE_BYTES if none). ``memory_share``: the memtables get that fraction of
    WRITE_BUFFER_BYTES (one of several partitions). ``point_reads``: a CF read mostly by
    key, whose memtables get a bloom filter (MEMTABLE_BLOOM_RATIO)."""
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.increase_parallelism(BACKGROUND_JOBS)
    opts.set_max_background_jobs(BACKGROUND_JOBS)
    opts.set_write_buffer_size(WRITE_BUFFER_BYTES // memory_share)
    opts.set_bytes_per_sync(BYTES_PER_SYNC)
    opts.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES)
    opts.set_recycle_log_file_num(RECYCLED_WALS)
    opts.set_compression_type(DBCompressionType.lz4())
    opts.set_max_log_file_size(MAX_LOG_FILE_BYTES)
    opts.set_keep_log_file_num(KEEP_LOG_FILES)
    table = BlockBasedOptions()
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
    table.set_block_cache(block_cache if block_cache is not None else Cache(BLOCK_CACHE_BYTES))
    opts.set_block_based_table_factory(table)
    if point_reads:
        opts.set_memtable_whole_key_filtering(True)
        opts.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO)
    return opts


class RocksStore:
    """Raw-bytes RocksDB with one handle per column family. Writes go through ``write``."""

    def __init__(self, path: str | os.PathLike[str], *, memory_share: int = 1) -> None:
        """``memory_share``: how many stores divide the budgets (a data dir's partitions,
        whichever processes open them); each gets that fraction of the memtable and block
        cache budgets, so that partitions do not multiply memory."""
        self.path = os.fspath(path)
        self.memory_share = memory_share
        dirs.makedirs(self.path)  # its name durable: RocksDB fsyncs only the dir itself
        self._synced = WriteOptions()
        self._synced.sync = True
        self._unsynced = WriteOptions()
        self._closed = False
        self.failed = False  # a write failed: RocksDB refuses writes until reopened
        self.reopens = 0
        self._secrets: dict[bytes, bytes] = {}
        self._open()

    def _open(self) -> None:
        share = self.memory_share
        cache = Cache(BLOCK_CACHE_BYTES // share)
        try:
            self._db: Rdict | None = Rdict(
                self.path,
                _options(cache, share),
                column_families={
                    cf: _options(cache, share, point_reads=cf in POINT_READ_CFS) for cf in CF.ALL
                },
            )
        except Exception as exc:  # rocksdict raises plain exceptions
            raise StorageError(f"cannot open store at {self.path}: {exc}") from exc
        self._cfs = {cf: self._db.get_column_family(cf) for cf in CF.ALL}
        self._handles = {cf: self._db.get_column_family_handle(cf) for cf in CF.ALL}
        self.failed = False

    def reopen(self) -> None:
        """Close and open again: how RocksDB leaves its read-only state after a failed
        write (rocksdict has no DB::Resume). Recovery replays the WAL up to the last
        complete record, so nothing acknowledged is lost. Call from the writer only."""
        db, self._db = self._db, None
        self._cfs, self._handles = {}, {}  # readers in flight now fail with StorageError
        if db is not None:
            with contextlib.suppress(Exception):  # a WAL that cannot be flushed: replay it
                db.close()
            del db
        gc.collect()  # the last reference to the old DB must go before its LOCK is free
        self._open()
        self.reopens += 1

    def secret(self, key: bytes) -> bytes:
        """A random 32-byte secret kept in meta under ``key``: made (synced) on first use,
        the same across restarts, read once per process. Written here, not through a
        batch: so read only here, never by an op (the writer keeps the meta values its
        batches read, storage/txn.py, and would not see this write). A replicated partition
        (cluster mode) never makes one here: its copy gets the secret with the partition's
        first fence record, the same on every node (app/cluster/replica/, workers/engine.py)."""
        cached = self._secrets.get(key)
        if cached is not None:
            return cached
        value = self.get(CF.META, key)
        if value is None:
            value = os.urandom(SECRET_BYTES)
            self.write([Put(CF.META, key, value)], sync=True)
        self._secrets[key] = value
        return value

    def free_bytes(self) -> int:
        """Bytes the data directory's filesystem still has for us."""
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    # --- reads ---------------------------------------------------------------------------

    def get(self, cf: str, key: bytes) -> bytes | None:
        self._check_open()
        try:
            value = self._cfs[cf].get(key)
        except Exception as exc:  # closed under us by a reopen, or an I/O error
            raise StorageError(f"read failed: {exc}") from exc
        return None if value is None else bytes(value)

    def get_many(self, cf: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """One multi-get for many keys (missing keys give None)."""
        self._check_open()
        if not keys:
            return []
        try:
            found = self._cfs[cf].get(list(keys))
        except Exception as exc:
            raise StorageError(f"read failed: {exc}") from exc
        return list(found) if found is not None else [None] * len(keys)

    def scan(self, cf: str, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` entries with ``start <= key < end``, in key order.

        The iterator seeks straight to ``start`` and stops at ``end`` (ReadOptions upper
        bound), so tombstones outside the range are never walked.
        """
        self._check_open()
        read = ReadOptions()
        read.set_iterate_upper_bound(end)
        try:  # rocksdict's own iteration: a third less than a Python loop of it.next()
            items = cast(
                Iterable[tuple[bytes, bytes]], self._cfs[cf].items(from_key=start, read_opt=read)
            )
            return list(islice(items, limit))
        except Exception as exc:
            raise StorageError(f"scan failed: {exc}") from exc

    def count(self, cf: str, start: bytes, end: bytes, limit: int) -> int:
        """How many keys ``start <= key < end`` there are, counting up to ``limit``."""
        n = 0
        with self._range(cf, start, end) as it:
            while it.valid() and n < limit:
                n += 1
                it.next()
        return n

    @contextlib.contextmanager
    def _range(self, cf: str, start: bytes, end: bytes) -> Iterator[RdictIter]:
        """An iterator at ``start`` bounded by ``end``; its errors become StorageError."""
        self._check_open()
        read = ReadOptions()
        read.set_iterate_upper_bound(end)
        try:
            it = self._cfs[cf].iter(read)
            it.seek(start)
            yield it
        except Exception as exc:
            raise StorageError(f"scan failed: {exc}") from exc

    def scan_where(
        self,
        cf: str,
        start: bytes,
        end: bytes,
        limit: int,
        budget: int,
        keep: Callable[[bytes, bytes], bool],
    ) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
        """Up to ``limit`` entries in ``[start, end)`` that ``keep(key, value)``, looking at
        no more than ``budget`` entries; and the key to resume after, None if none is left.

        For listings filtered out of a shared keyspace (one topic's timers among all): a
        page costs at most ``budget`` reads, however rare the matches are.
        """
        self._check_open()
        read = ReadOptions()
        read.set_iterate_upper_bound(end)
        out: list[tuple[bytes, bytes]] = []
        seen = 0
        last: bytes | None = None
        try:
            it = self._cfs[cf].iter(read)
            it.seek(start)
            while it.valid():
                if len(out) == limit or seen == budget:
                    return out, last  # more may follow: resume after what was looked at
                last = it.key()
                value = it.value()
                seen += 1
                if keep(last, value):
                    out.append((last, value))
                it.next()
        except Exception as exc:
            raise StorageError(f"scan failed: {exc}") from exc
        return out, None

    def first_key(self, cf: str, start: bytes, end: bytes) -> bytes | None:
        found = self.scan(cf, start, end, 1)
        return found[0][0] if found else None

    def last_key(self, cf: str, start: bytes, at: bytes) -> bytes | None:
        """The last key with ``start <= key <= at`` (one backward seek), None if none."""
        self._check_open()
        try:  # no lower bound in ReadOptions: rocksdict 0.3 does not apply it in raw mode
            it = self._cfs[cf].iter(ReadOptions())
            it.seek_for_prev(at)
            key = bytes(it.key()) if it.valid() else None
        except Exception as exc:
            raise StorageError(f"scan failed: {exc}") from exc
        return key if key is not None and key >= start else None

    # --- writes --------------------------------------------------------------------------

    def write(self, ops: Iterable[WriteOp], *, sync: bool) -> None:
        """Apply all ops atomically (one WriteBatch); ``sync`` fsyncs the WAL first."""
        self._check_open()
        batch = WriteBatch(raw_mode=True)
        handles = self._handles
        for op in ops:
            if type(op) is Put:
                batch.put(op.key, op.value, handles[op.cf])
            elif type(op) is Delete:
                batch.delete(op.key, handles[op.cf])
            else:
                assert isinstance(op, DeleteRange)
                batch.delete_range(op.begin, op.end, handles[op.cf])
        self._commit(batch, sync)

    def write_staged(
        self,
        ranges: Sequence[DeleteRange],
        staged: dict[str, dict[bytes, bytes | None]],
        *,
        sync: bool,
    ) -> None:
        """Like ``write``, from range deletes and per-CF final values (None = delete)."""
        self._check_open()
        batch = WriteBatch(raw_mode=True)
        self._stage(batch, ranges, staged)
        self._commit(batch, sync)

    def write_commits(
        self,
        commits: Iterable[tuple[Sequence[DeleteRange], dict[str, dict[bytes, bytes | None]]]],
        extra: Sequence[Put],
        *,
        sync: bool,
    ) -> None:
        """Several ``write_staged`` calls' arguments, in order, and ``extra`` puts after
        them, as one atomic WriteBatch (a standby applying changelog records with the seq
        it applied up to: app/cluster/replica/)."""
        self._check_open()
        batch = WriteBatch(raw_mode=True)
        for ranges, staged in commits:
            self._stage(batch, ranges, staged)
        handles = self._handles
        for op in extra:
            batch.put(op.key, op.value, handles[op.cf])
        self._commit(batch, sync)

    def _stage(
        self,
        batch: WriteBatch,
        ranges: Sequence[DeleteRange],
        staged: dict[str, dict[bytes, bytes | None]],
    ) -> None:
        handles = self._handles
        for r in ranges:
            batch.delete_range(r.begin, r.end, handles[r.cf])
        for cf, values in staged.items():
            handle = handles[cf]
            for key, value in values.items():
                if value is None:
                    batch.delete(key, handle)
                else:
                    batch.put(key, value, handle)

    def _commit(self, batch: WriteBatch, sync: bool) -> None:
        if self._db is None:
            raise StorageError("the store is not open (a reopen failed)")
        try:
            self._db.write(batch, self._synced if sync else self._unsynced)
        except Exception as exc:
            self.failed = True
            raise StorageError(f"write failed: {exc}") from exc

    def sync_wal(self) -> None:
        """fsync the WAL: every write so far (synced or not) is on disk when this returns.

        rocksdict releases the GIL here (not in ``write``, where a synced write holds it
        through the fsync), so other threads run meanwhile: the writer syncs this way, on
        its own thread (workers/writer.py, Syncer)."""
        if self._db is None:
            raise StorageError("the store is not open (a reopen failed)")
        try:
            self._db.flush_wal(True)
        except Exception as exc:
            self.failed = True
            raise StorageError(f"WAL sync failed: {exc}") from exc

    def checkpoint(self, path: str) -> None:
        """A consistent copy of the whole store in the new directory ``path`` (RocksDB's
        checkpoint: its SSTs hard-linked, the memtables flushed first), openable as a
        store of its own: a partition's snapshot (app/cluster/replica/snapshot.py)."""
        if self._db is None:
            raise StorageError("the store is not open (a reopen failed)")
        try:
            Checkpoint(self._db).create_checkpoint(path)
        except Exception as exc:
            raise StorageError(f"checkpoint failed: {exc}") from exc

    def compact(self, cf: str, begin: bytes | None, end: bytes | None) -> None:
        """Compact a key range so that its tombstones are dropped from disk."""
        self._check_open()
        try:
            self._cfs[cf].compact_range(begin, end)
        except Exception as exc:
            raise StorageError(f"compaction failed: {exc}") from exc

    def property_int(self, cf: str, name: str) -> int:
        value = self._cfs[cf].property_int_value(name)
        return int(value or 0)

    def memory(self) -> dict[str, int]:
        """Bytes RocksDB holds in memory, by kind: memtables (live and flushed-but-pinned),
        the shared block cache, and SST index/filter blocks outside it; none while the
        store is closed or being reopened (a scrape then must not fail)."""
        cfs = self._cfs  # a reopen swaps in an empty dict, then the new handles

        def total(name: str, of: tuple[str, ...] = CF.ALL) -> int:
            return sum(int(cfs[cf].property_int_value(name) or 0) for cf in of)

        try:
            return {
                "memtables": total(MEMTABLES),
                "block_cache": total(BLOCK_CACHE, (CF.META,)),  # one cache for every CF
                "table_readers": total(TABLE_READERS),
            }
        except KeyError:
            return {}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._cfs, self._handles = {}, {}
        if self._db is None:
            return
        # fsync what unsynced writes left in the page cache; after a failed write there is
        # nothing more to flush (the WAL is replayed on open either way).
        with contextlib.suppress(Exception):
            self._db.flush_wal(True)
        try:
            self._db.close()
        except Exception as exc:
            raise StorageError(f"close failed: {exc}") from exc

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("store is closed")
