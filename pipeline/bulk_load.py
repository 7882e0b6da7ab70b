"""``python -m pipeline.bulk_load``: validate rows with the service's own checks, send the
valid ones through the batch API from the executors, write the rest as rejects.

The JVM builds the item of each row it finds surely valid (``pipeline.items``): an
executor's Python then only finishes those bytes (``ready_item``), sends them and settles
the answers; every other row goes through ``rows.to_message``, the service's checks.

Every row ends as exactly one of loaded (201), already_present (200: this id was sent
before, by an earlier run or a retried task) or rejected (a check here or the service
refused the item), so ``loaded + already_present + rejected == rows``.
"""

from __future__ import annotations

import csv
import http.client
import os
import queue
import re
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from app.config import Settings
from app.defaults import MAX_BATCH
from app.schemas import MSG_ID_PATTERN
from pipeline import cli
from pipeline.items import DUE, ITEM, LOCAL_DUE, LOCAL_PLACEHOLDER, with_items
from pipeline.rows import COLUMNS, Message, Reject, hashed_id, local_to_ms, text, to_message
from pipeline.sender import BatchSender, ServiceRefused, results_of

FORMATS = ("parquet", "csv", "json")
ORDINAL = "__rt_ordinal"  # internal columns, named so no input column can clash
CONFLICT = "__rt_conflict"
CORRUPT = "_corrupt_record"  # Spark's column for a line it could not parse
_HASH, _KEY, _POS, _BUCKET = "__rt_hash", "__rt_key", "__rt_pos", "__rt_bucket"
REQUEST_SLACK_BYTES = 64 * 1024  # under the service's request limit, for the envelope
KINDS = ("loaded", "already_present", "rejected")
IN_FLIGHT = 4  # batches a task has on their way at once (one connection each)
# Tasks per slot (core) of the cluster: rows settle (and the progress line moves) as each
# task ends, and a slow task holds up a fraction of the load, not half of it.
TASKS_PER_SLOT = 4
LIMITS_PATH = "/v1/limits"


def read_input(spark: Any, path: str, fmt: str) -> Any:
    """The input as a DataFrame (CSV with a header, JSON Lines, Parquet); exit 2 if absent
    or not readable as ``fmt`` (a CSV named .parquet, say).

    CSV and JSON are read in Spark's PERMISSIVE mode with a corrupt-record column: a line
    that does not parse (an unclosed quote, more or fewer fields than the header, broken
    JSON) keeps its raw text there and becomes a reject, never a row with altered content."""
    master = spark.sparkContext.master
    cli.require_path(path, master=master)
    if fmt == "parquet":
        require_parquet(path, master)
    return spark_read(spark, path, fmt)


def spark_read(spark: Any, path: str, fmt: str) -> Any:
    """``read_input`` past the local checks: what Spark cannot read is one line, exit 2."""
    reader = spark.read
    try:
        if fmt == "csv":
            header = reader.option("header", True).option("escape", '"').csv(path).columns
            names = ", ".join(f"`{name.replace('`', '``')}` string" for name in header)
            df = (
                reader.schema(f"{names}, {CORRUPT} string")
                .option("header", True)
                .option("escape", '"')
                .option("mode", "PERMISSIVE")
                .option("columnNameOfCorruptRecord", CORRUPT)
                .csv(path)
            )
        elif fmt == "json":
            df = reader.option("columnNameOfCorruptRecord", CORRUPT).json(path)
        else:
            df = reader.parquet(path)
        df.schema  # noqa: B018 (resolve it here: an unreadable file is exit 2, not a trace)
    except Exception as exc:
        raise cli.JobError(f"{path}: cannot be read as {fmt}: {cli.first_line(exc)}") from None
    return df


PARQUET_MAGIC = b"PAR1"  # a Parquet file starts and ends with it


def require_parquet(path: str, master: str) -> None:
    """Exit 2 before Spark starts if a local file Spark would read is not Parquet (a CSV
    named .parquet); a path elsewhere is Spark's to read and judge."""
    if not cli.is_local_path(path, master):
        return
    path = path.removeprefix("file://")
    files = (
        [path]
        if os.path.isfile(path)
        else [
            os.path.join(folder, name)
            for folder, dirs, names in os.walk(path)
            for name in names
            if not name.startswith(("_", "."))
            and not any(
                part.startswith(("_", "."))
                for part in os.path.relpath(folder, path).split(os.sep)
                if part != "."
            )
        ]
    )
    for name in files:
        size = os.path.getsize(name)
        with open(name, "rb") as f:
            head = f.read(4)
            f.seek(max(0, size - 4))
            tail = f.read(4)
        if size < 12 or head != PARQUET_MAGIC or tail != PARQUET_MAGIC:
            raise cli.JobError(f"{name}: not a Parquet file (give its --format)")


def prepare(df: Any, topic: str | None, tasks: int | None = None, string_maps: bool = False) -> Any:
    """Check the columns, make them Arrow-friendly and lay the rows out over ``tasks``
    tasks (``number``; by default ``TASKS_PER_SLOT`` a slot of the cluster): each row
    marked with its rank among identical id-less rows and, when an earlier row of the
    input has its msg_id with other content, that row's number. A map, a struct or an
    array becomes its JSON text, except with ``string_maps`` a map of strings (Parquet's
    properties), which ``pipeline.items.with_items`` reads as it is and writes as text."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    unknown = sorted(set(df.columns) - set(COLUMNS) - {CORRUPT})
    if unknown:
        raise cli.JobError(f"unknown column(s) {', '.join(unknown)}; expected {', '.join(COLUMNS)}")
    if "body" not in df.columns:
        raise cli.JobError("missing column body")
    if "topic" not in df.columns and topic is None:
        raise cli.JobError("missing column topic (or give --topic)")
    df = with_topic(df, topic)
    keep = (T.StringType, T.IntegralType, T.FractionalType, T.BooleanType)
    for field in df.schema.fields:
        if string_maps and _string_map(field.dataType):
            continue
        if isinstance(field.dataType, T.MapType | T.StructType | T.ArrayType):
            df = df.withColumn(field.name, F.to_json(field.name))
        elif not isinstance(field.dataType, keep):
            df = df.withColumn(field.name, F.col(field.name).cast("string"))
    if tasks is None:
        tasks = df.sparkSession.sparkContext.defaultParallelism * TASKS_PER_SLOT
    return number(df, tasks)


def with_topic(df: Any, topic: str | None) -> Any:
    """``df`` with ``topic`` where a row has none (``--topic``)."""
    from pyspark.sql import functions as F

    if topic is None:
        return df
    present = F.col("topic").cast("string") if "topic" in df.columns else F.lit(None)
    return df.withColumn("topic", F.coalesce(present, F.lit(topic)))


def number(df: Any, tasks: int) -> Any:
    """``df`` in ``tasks`` tasks, laid out for ``numbered`` (the executor's Python), which
    adds ``ORDINAL`` (the k-th of identical rows without a msg_id: their ids differ by it)
    and ``CONFLICT`` (for a row whose msg_id an earlier row has with other content, that
    row's place in the input, ``monotonically_increasing_id``: ``row_numbers`` turns it
    into a number, only when a load has such rows).

    One shuffle does the layout: rows go to a task by a hash of (topic, key) — the key a
    row's msg_id, or its content when it has none — so every row of a key is in one task,
    sorted there by that hash, the key and their place in the input: the rows of a key
    follow each other, its first row first. The hash order mixes the topics within a task:
    its requests go to every topic (every partition of the service) at once, and the
    tasks are even whatever the topics' sizes. (A window over each key would find the
    same first rows, at the cost of a window's buffers for each of a million keys.)"""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    # A map is its keys and its values, each in the map's order (no JSON text is written
    # for the digest): two maps are one content exactly when both lists are equal.
    content = [
        part
        for f in df.schema.fields
        if f.name != CORRUPT
        for part in (
            (F.map_keys(f.name), F.map_values(f.name))
            if isinstance(f.dataType, T.MapType)
            else (F.col(f.name),)
        )
    ]
    # A file without the msg_id column: every row's id is its content's.
    msg_id = (F.col("msg_id") if "msg_id" in df.columns else F.lit(None)).cast("string")
    # An id the service refuses is that row's reject, whatever other rows hold: no key.
    has_id = F.coalesce(msg_id.rlike(MSG_ID_PATTERN), F.lit(False))
    no_id = F.coalesce(msg_id, F.lit("")) == ""
    digest = F.xxhash64(*content, *[c.isNull() for c in content])
    return (
        df.withColumn(_POS, F.monotonically_increasing_id())
        .withColumn(_HASH, digest)
        .withColumn(
            _KEY,
            F.when(has_id, msg_id).when(
                no_id, F.concat(F.lit(CONTENT_KEY), F.col(_HASH).cast("string"))
            ),
        )
        .withColumn(_BUCKET, F.xxhash64("topic", _KEY))
        .repartition(tasks, _BUCKET)
        .sortWithinPartitions(_BUCKET, "topic", _KEY, _POS)
    )


CONTENT_KEY = "\x00"  # the head of a key made of a row's content (no msg_id has it)
NUMBERING = (_POS, _HASH, _KEY, _BUCKET)  # number's columns, numbered's to read


class Numbering:
    """``ORDINAL`` and ``CONFLICT`` of a task's rows as ``number`` lays them out, batch
    after batch: the rows of a (topic, key) follow each other in the order of the input,
    and a key's rows may go on into the next batch."""

    def __init__(self) -> None:
        # The group of the last row seen: (bucket, topic, key, first place, first hash, rows).
        self._group: tuple[Any, Any, Any, int, int, int] | None = None

    def number(self, batch: Any) -> Any:
        """``batch`` without ``NUMBERING``, with ``ORDINAL`` and ``CONFLICT``."""
        import numpy as np
        import pyarrow as pa

        n = batch.num_rows
        ordinals = np.zeros(n, dtype=np.int32)
        conflicts: list[int | None] = [None] * n
        if n:
            buckets = batch.column(_BUCKET).to_numpy()
            # A row whose hash of (topic, key) is its previous row's may be of its group:
            # the few such rows are looked at one by one, every other row begins a group.
            same = np.empty(n, dtype=bool)
            same[0] = self._group is not None and self._group[0] == buckets[0]
            same[1:] = buckets[1:] == buckets[:-1]
            if same.any():
                self._follow(batch, np.flatnonzero(same).tolist(), ordinals, conflicts)
            if not same[n - 1]:
                last = [batch.column(name)[n - 1].as_py() for name in ("topic", _KEY, _POS, _HASH)]
                self._group = (int(buckets[n - 1]), last[0], last[1], last[2], last[3], 1)
        names = [name for name in batch.schema.names if name not in NUMBERING]
        return pa.RecordBatch.from_arrays(
            [
                *(batch.column(name) for name in names),
                pa.array(ordinals),
                pa.array(conflicts, pa.int64()),
            ],
            names=[*names, ORDINAL, CONFLICT],
        )

    def _follow(
        self, batch: Any, rows: list[int], ordinals: Any, conflicts: list[int | None]
    ) -> None:
        """The rows of ``rows`` (each with its previous row's hash), in order."""
        buckets = batch.column(_BUCKET)
        topics, keys = batch.column("topic"), batch.column(_KEY)
        places, hashes = batch.column(_POS), batch.column(_HASH)
        group = self._group
        previous = -1  # the first row may go on with the last batch's group
        for i in rows:
            if i != previous + 1:  # the row before began a group
                group = (
                    buckets[i - 1].as_py(),
                    topics[i - 1].as_py(),
                    keys[i - 1].as_py(),
                    places[i - 1].as_py(),
                    hashes[i - 1].as_py(),
                    1,
                )
            assert group is not None
            bucket, topic, key, first, digest = (
                buckets[i].as_py(),
                topics[i].as_py(),
                keys[i].as_py(),
                places[i].as_py(),
                hashes[i].as_py(),
            )
            if (topic, key) != (group[1], group[2]):  # another key with the same hash
                group = (bucket, topic, key, first, digest, 1)
            else:
                group = (*group[:5], group[5] + 1)
                if key is None:  # an id the service refuses: the row's own reject
                    pass
                elif key.startswith(CONTENT_KEY):  # no msg_id: its rank among its copies
                    ordinals[i] = group[5] - 1
                elif digest != group[4]:  # its msg_id, an earlier row's, other content
                    conflicts[i] = group[3]
            previous = i
        self._group = group if previous == batch.num_rows - 1 else self._group


def numbered(batches: Iterator[Any]) -> Iterator[Any]:
    """A task's Arrow batches of ``number``'s rows with ``ORDINAL`` and ``CONFLICT`` in
    place of ``NUMBERING`` (``Numbering``)."""
    numbering = Numbering()
    for batch in batches:
        yield numbering.number(batch)


def numbered_schema(schema: Any) -> Any:
    """The Spark schema of ``numbered``'s rows for ``number``'s ``schema``."""
    from pyspark.sql import types as T

    fields = [f for f in schema.fields if f.name not in NUMBERING]
    return T.StructType(
        [*fields, T.StructField(ORDINAL, T.IntegerType()), T.StructField(CONFLICT, T.LongType())]
    )


PLACE = "\x00"  # around a row's place in a reject reason, until it is a row number
CONFLICT_REASON = "conflicts with row {row}: same msg_id, other content"
_PLACE_BITS = 33  # monotonically_increasing_id: the partition above, the index below
_PLACE_MASK = (1 << _PLACE_BITS) - 1


def place_offsets(df: Any) -> dict[int, int]:
    """For each partition of ``df`` as Spark reads it, the rows of the partitions before it
    (a count per partition: no column read for Parquet)."""
    from pyspark.sql import functions as F

    counts = df.select(F.spark_partition_id().alias("p")).groupBy("p").count().collect()
    before, total = {}, 0
    for p, n in sorted(counts):
        before[p] = total
        total += n
    return before


def row_number(place: int, before: dict[int, int]) -> int:
    """A row's number (1 = the first data row, in the order Spark reads the input, a single
    file's own order) from its place: the rows of the partitions before its own plus its
    index in its partition."""
    return before.get(place >> _PLACE_BITS, 0) + (place & _PLACE_MASK) + 1


def numbered_reason(reason: str, before: dict[int, int]) -> str:
    """``reason`` with a row's place (between ``PLACE``) as the row's number."""
    head, sep, rest = reason.partition(PLACE)
    if not sep:
        return reason
    place, _, tail = rest.partition(PLACE)
    return f"{head}{row_number(int(place), before)}{tail}"


def numbered_column(reason: Any, before: dict[int, int]) -> Any:
    """``numbered_reason`` as a Spark column of ``reason`` (a column of reasons)."""
    from pyspark.sql import functions as F

    place = F.substring_index(F.substring_index(reason, PLACE, 2), PLACE, -1).cast("long")
    offsets = F.create_map(
        *[F.lit(v).cast("long") for p, n in (before or {0: 0}).items() for v in (p, n)]
    )
    number = (
        F.coalesce(F.element_at(offsets, F.shiftright(place, _PLACE_BITS)), F.lit(0).cast("long"))
        + place.bitwiseAND(F.lit(_PLACE_MASK))
        + 1
    )
    head, tail = F.substring_index(reason, PLACE, 1), F.substring_index(reason, PLACE, -1)
    return F.when(
        F.instr(reason, PLACE) > 0, F.concat(head, number.cast("string"), tail)
    ).otherwise(reason)


@dataclass(frozen=True)
class Target:
    """Where and how the executors send (pickled to them)."""

    url: str
    api_key: str | None
    settings: Settings  # with the service's limits (``service_limits``)
    fmt: str = "parquet"  # the input's format, for the reason a line did not parse
    fields: int = 0  # a CSV header's number of fields
    max_batch: int = MAX_BATCH  # items of one request, as the service says
    columns: tuple[str, ...] = ()  # the input's columns, as rejects carry them


class Tally:
    """What one task did: counts per (kind, reason) and each rejected row (its own columns
    with ``reject_field`` and ``reject_reason``)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str | None]] = Counter()
        self.rejects: list[dict[str, Any]] = []

    def reject(self, row: dict[str, Any], field: str, reason: str) -> None:
        self.counts["rejected", f"{field}: {reason}"] += 1
        self.rejects.append({**row, REJECT_FIELD: field, REJECT_REASON: reason})

    def drain(self) -> list[dict[str, Any]]:
        """The rows of the result schema so far (and forget them): a row per count of
        loaded/already_present, a row per reason and a row per reject."""
        rows: list[dict[str, Any]] = [
            {"kind": kind if kind != "rejected" else "reason", "reason": reason, "count": n}
            for (kind, reason), n in self.counts.items()
        ]
        rows += [{"kind": "rejected", "count": 1, **row} for row in self.rejects]
        self.counts.clear()
        self.rejects = []
        return rows


REJECT_FIELD, REJECT_REASON = "reject_field", "reject_reason"
INTERNAL = (ORDINAL, CONFLICT, ITEM, DUE, *NUMBERING)  # columns of the load, not of the input


def result_schema(rows: Any) -> Any:
    """The Spark schema of what the tasks yield: the counts, and each reject as the input's
    own columns (written with ``DataFrame.write.json``)."""
    from pyspark.sql import types as T

    counts = [
        T.StructField("kind", T.StringType()),
        T.StructField("reason", T.StringType()),
        T.StructField("count", T.LongType()),
    ]
    # Nullable all: a count row has none of the input's columns.
    own = [
        T.StructField(f.name, f.dataType, True)
        for f in rows.schema.fields
        if f.name not in INTERNAL
    ]
    texts = [
        T.StructField(REJECT_FIELD, T.StringType()),
        T.StructField(REJECT_REASON, T.StringType()),
    ]
    return T.StructType([*counts, *own, *texts])


def row_at(batch: Any, position: int) -> dict[str, Any]:
    """A row of an Arrow batch as ``to_message`` reads it, its numbering columns with it
    (``Loader.add`` takes those off)."""
    return {
        name: batch.column(name)[position].as_py()
        for name in batch.schema.names
        if name not in (ITEM, DUE)
    }


class Batch:
    """A request being filled for one topic: the items, and for each its row (a dict, or
    the Arrow batch it is in and its place there, read only if the item is refused) and the
    deliver time it fixes (not one relative to now: a stored message with this id and
    another time is not this row). Parallel lists: no object a row while it is on its way."""

    __slots__ = ("dues", "items", "places", "rows", "size")

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.rows: list[Any] = []  # dict, or a pyarrow RecordBatch
        self.places: list[int] = []  # the place in that batch; -1 for a dict
        self.dues: list[int | None] = []
        self.size = 0

    def row(self, k: int) -> dict[str, Any]:
        """The row of item ``k``, without the numbering columns (a reject carries it)."""
        row = self.rows[k]
        if self.places[k] < 0:
            return dict(row)
        return {
            name: value
            for name, value in row_at(row, self.places[k]).items()
            if name not in INTERNAL
        }


def malformed(raw: str, fmt: str, fields: int) -> str:
    """Why Spark could not parse the line ``raw`` of a ``fmt`` input (``fields`` in a CSV
    header), in words."""
    if fmt != "csv":
        return f"not a valid {'JSON' if fmt == 'json' else fmt} line"
    try:
        (parsed,) = list(csv.reader([raw], strict=True))
    except csv.Error as exc:
        return f"malformed CSV: {exc}"
    except ValueError:
        return "malformed CSV: the line holds more than one record"
    return f"malformed CSV: {len(parsed)} fields, the header has {fields}"


class Loader:
    """One task's work: check rows, fill per-topic batches, send them, tally the answers.

    Up to ``IN_FLIGHT`` batches are on their way at once, each on its own connection, while
    this thread goes on checking rows: the service's time per batch overlaps the task's,
    and memory stays bounded by those batches."""

    def __init__(self, target: Target, in_flight: int = IN_FLIGHT) -> None:
        self.target = target
        self.tally = Tally()
        self.checked = 0  # rows through the service's checks here (``to_message``)
        self.limit = target.settings.max_request_bytes - REQUEST_SLACK_BYTES
        self._batches: dict[str, Batch] = {}
        self._in_flight = in_flight
        self._pool = ThreadPoolExecutor(in_flight, thread_name_prefix="bulk-load-send")
        self._senders: queue.SimpleQueue[BatchSender] = queue.SimpleQueue()
        self._made: list[BatchSender] = []
        self._sent: deque[tuple[Future[bytes], Batch]] = deque()

    def add_batch(self, batch: Any, now_ms: int) -> None:
        """Every row of an Arrow batch: one with an item built in the JVM (``ITEM``) as
        bytes, any other column by column to Python, a dict a row for its checks."""
        if ITEM in batch.schema.names:
            self.add_ready(batch, now_ms)
            return
        names = batch.schema.names
        for values in zip(*(column.to_pylist() for column in batch.columns), strict=True):
            self.add(dict(zip(names, values, strict=True)), now_ms)

    def add_ready(self, batch: Any, now_ms: int) -> None:
        """The rows of a batch with ``ITEM``: an item the JVM built (``pipeline.items``) is
        finished by ``ready_item``; a row without one, or that fails what only this side
        checks, goes through ``add``."""
        names, n = batch.schema.names, batch.num_rows
        items, dues = batch.column(ITEM).to_pylist(), batch.column(DUE).to_pylist()
        if CONFLICT in names and batch.column(CONFLICT).null_count < n:
            # A row whose msg_id an earlier row has with other content: add says so.
            conflicts = batch.column(CONFLICT).to_pylist()
            items = [
                None if c is not None else item for item, c in zip(items, conflicts, strict=True)
            ]
        ordinals = batch.column(ORDINAL).to_pylist() if ORDINAL in names else [0] * n
        local = LOCAL_DUE in dues
        whens = _column(batch, "deliver_at") if local else [None] * n
        zones = _column(batch, "timezone") if local else [None] * n
        latest = now_ms + self.target.settings.max_delay_ms
        topics = batch.column("topic").to_pylist()
        for i in range(n):
            item = items[i]
            ready = None
            if item is not None:
                ready = ready_item(
                    topics[i], item, dues[i], ordinals[i], whens[i], zones[i], latest
                )
            if ready is None:
                self.add(row_at(batch, i), now_ms)
            else:
                self._queue(str(topics[i]), ready[0], batch, i, ready[1])

    def add(self, row: dict[str, Any], now_ms: int) -> None:
        """One row through the service's checks (``to_message``)."""
        self.checked += 1
        ordinal = row.pop(ORDINAL, 0) or 0
        conflict = row.pop(CONFLICT, None)
        raw = row.pop(CORRUPT, None)
        if raw is not None:
            # What Spark parsed of a malformed line is not the row: the reject keeps the line.
            reason = malformed(raw, self.target.fmt, self.target.fields)
            self.tally.reject({CORRUPT: raw}, "row", reason)
            return
        result = to_message(row, now_ms, self.target.settings, ordinal)
        if isinstance(result, Reject):  # its own fault first: a bad id is not a conflict
            self.tally.reject(row, result.field, result.reason)
            return
        if conflict is not None:
            self.tally.reject(
                row, "msg_id", CONFLICT_REASON.format(row=f"{PLACE}{conflict}{PLACE}")
            )
            return
        self._queue_message(result, row)

    def _queue_message(self, message: Message, row: dict[str, Any]) -> None:
        due = message.item.get("deliver_at_ms")
        self._queue(message.topic, orjson.dumps(message.item), row, -1, due)

    def _queue(self, topic: str, encoded: bytes, row: Any, place: int, due: int | None) -> None:
        batch = self._batches.get(topic)
        if batch is None:
            batch = self._batches[topic] = Batch()
        elif batch.items and batch.size + len(encoded) > self.limit:
            self.flush(topic)
            batch = self._batches[topic] = Batch()
        batch.items.append(encoded)
        batch.rows.append(row)
        batch.places.append(place)
        batch.dues.append(due)
        batch.size += len(encoded) + 1
        if len(batch.items) >= self.target.max_batch:
            self.flush(topic)

    def flush(self, topic: str | None = None) -> None:
        """Send the batch of ``topic`` (of every topic if None); waits for the oldest batch
        on its way when ``in_flight`` are."""
        for name in [topic] if topic is not None else list(self._batches):
            batch = self._batches.pop(name, None)
            if batch is None or not batch.items:
                continue
            while len(self._sent) >= self._in_flight:
                self._settle(*self._sent.popleft())
            self._sent.append((self._pool.submit(self._send, name, batch.items), batch))

    def finish(self) -> None:
        """Send what is left and wait for every answer."""
        self.flush()
        while self._sent:
            self._settle(*self._sent.popleft())

    def close(self) -> None:
        for pending, _ in self._sent:
            pending.cancel()
        self._pool.shutdown(wait=True)
        for sender in self._made:
            sender.close()

    def _send(self, topic: str, items: list[bytes]) -> bytes:
        """On a pool thread: one request on a connection no other thread uses meanwhile."""
        try:
            sender = self._senders.get_nowait()
        except queue.Empty:
            sender = BatchSender(self.target.url, self.target.api_key)
            self._made.append(sender)
        try:
            return sender.post(topic, items)
        finally:
            self._senders.put(sender)

    def _settle(self, pending: Future[bytes], batch: Batch) -> None:
        answer = pending.result()
        n = len(batch.items)
        if answer.count(b'"status":201,') + answer.count(b'"status":201}') == n:
            self.tally.counts["loaded", None] += n  # every item created: nothing to read
            return
        results = results_of(answer)
        if len(results) != n:
            raise ServiceRefused(f"the service answered {len(results)} results for {n} items")
        for k, result in enumerate(results):
            status, due = result["status"], batch.dues[k]
            if status == 201:
                self.tally.counts["loaded", None] += 1
            elif status == 200 and due is not None and result.get("deliver_at_ms") != due:
                stored = result.get("deliver_at_ms")
                self.tally.reject(
                    batch.row(k),
                    "msg_id",
                    f"differs from the stored message: due at {stored}, this row at {due} (200)",
                )
            elif status == 200:
                self.tally.counts["already_present", None] += 1
            else:
                field, reason = _split(str(result.get("error") or f"HTTP {status}"))
                self.tally.reject(batch.row(k), field, f"{reason} ({status})")


def ready_item(
    topic: Any,
    item: bytes,
    due: int | None,
    ordinal: int | None,
    deliver_at: Any,
    timezone: Any,
    latest: int,
) -> tuple[bytes, int | None] | None:
    """An item the JVM built (``pipeline.items``: ``ITEM``, ``DUE``) finished with what
    depends on now and on this Python: a local time's instant (``rows.local_to_ms``), a
    fixed deliver time no later than ``latest`` (now + the maximum delay), the content id
    of a row without msg_id. (The item, the deliver time it fixes), or None if the row
    fails one of these (``to_message`` then says why)."""
    if due == LOCAL_DUE:
        instant = local_to_ms(text(deliver_at) or "", text(timezone))
        if not isinstance(instant, int) or instant < 0:
            return None
        due = instant
        item = item.replace(LOCAL_PLACEHOLDER, b'"deliver_at_ms":%d' % due, 1)
    if due is not None and due > latest:
        return None
    if not item.startswith(b'{"msg_id":'):
        if b"\\u" in item:  # a control character: its escape as orjson writes it
            item = _ESCAPE.sub(_orjson_escape, item)
        content = b'["%s",%s]' % (str(topic).encode(), item)
        item = b'{"msg_id":"%s",%s' % (hashed_id(content, ordinal or 0).encode(), item[1:])
    return item, due


# An escape in Spark's JSON: ``\\`` and ``\"`` taken whole, so a ``u`` after an escaped
# backslash is text. Spark writes ``\u001F`` where orjson writes ``\u001f`` (the only
# difference between the two): the content id hashes orjson's bytes.
_ESCAPE = re.compile(rb"\\(u[0-9A-Fa-f]{4}|.)")


def _orjson_escape(match: re.Match[bytes]) -> bytes:
    return match.group(0).lower()


def _column(batch: Any, name: str) -> list[Any]:
    """A column of ``batch`` as a list (of None if it has no such column)."""
    if name in batch.schema.names:
        return list(batch.column(name).to_pylist())
    return [None] * batch.num_rows


def _split(error: str) -> tuple[str, str]:
    """The service's ``field: reason`` item error → (field, reason); msg_id for conflicts."""
    field, sep, reason = error.partition(": ")
    if sep and field.isidentifier():
        return field, reason
    return "msg_id", error


def load_partition(target: Target, batches: Iterator[Any], schema: Any = None) -> Iterator[Any]:
    """mapInArrow body: Arrow batches of input rows in, Arrow batches of result rows out
    (``schema``: the Arrow form of ``result_schema``; by default the counts and the reject
    columns only, for a caller that reads them itself)."""
    import pyarrow as pa

    loader = Loader(target)
    try:
        for batch in batches:
            if schema is None:
                schema = _default_result(batch.schema)
            now_ms = time.time_ns() // 1_000_000
            loader.add_batch(batch, now_ms)
            yield pa.RecordBatch.from_pylist(loader.tally.drain(), schema=schema)
        loader.finish()
        if schema is not None:
            yield pa.RecordBatch.from_pylist(loader.tally.drain(), schema=schema)
    finally:
        loader.close()


def _default_result(input_schema: Any) -> Any:
    import pyarrow as pa

    own = [f for f in input_schema if f.name not in INTERNAL]
    counts = [("kind", pa.string()), ("reason", pa.string()), ("count", pa.int64())]
    texts = [(REJECT_FIELD, pa.string()), (REJECT_REASON, pa.string())]
    return pa.schema([*counts, *own, *texts])


@dataclass(frozen=True)
class Limits:
    """What the service accepts (``GET /v1/limits``), for the checks and the batches."""

    settings: Settings
    max_batch: int


def preflight(url: str, api_key: str | None) -> Limits:
    """The service's limits; exit 2 now, not in every executor, if the service is
    unreachable or refuses the key (an empty batch is refused, 422, only after the key was
    accepted)."""
    sender = BatchSender(url, api_key)
    prefix = urlsplit(url).path.rstrip("/")
    try:
        status, _, _data = sender._post(
            f"{prefix}/v1/topics/preflight/messages/batch", b'{"messages":[]}'
        )
        if status in (401, 403):
            raise cli.JobError(f"the service at {url} refused the API key ({status})")
        status, _, data = sender._get(f"{prefix}{LIMITS_PATH}")
    except (OSError, http.client.HTTPException) as exc:
        raise cli.JobError(f"cannot reach the service at {url}: {exc}") from None
    finally:
        sender.close()
    try:
        if status != 200:
            raise ValueError(f"HTTP {status}")
        said = orjson.loads(data)
        settings = Settings(
            max_request_bytes=said["max_request_bytes"],
            max_body_bytes=said["max_body_bytes"],
            max_properties=said["max_properties"],
            max_delay_ms=said["max_delay_ms"],
        )
        limits = Limits(settings, int(said["max_batch"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise cli.JobError(
            f"the service at {url} did not say its limits ({LIMITS_PATH}: {exc})"
        ) from None
    if limits.max_batch < 1:
        raise cli.JobError(f"the service at {url} said limits it cannot mean: {said}")
    return limits


def run(argv: list[str]) -> int:
    p = cli.parser("bulk_load", "Load rows into rocktimer through the batch API.", service=True)
    p.add_argument("--input", required=True, help="a file or directory of rows")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--rejects", required=True, help="directory for the rejected rows (JSON Lines)")
    p.add_argument("--topic", help="the topic for rows without a topic column/value")
    args = p.parse_args(argv)
    cli.require_path(args.input, master=args.master)
    if args.format == "parquet":
        require_parquet(args.input, args.master)
    limits = preflight(args.url, args.api_key)
    started = time.monotonic()
    spark = cli.session(args.master, "bulk_load", streaming=True)
    done = spark.sparkContext.accumulator(0)  # rows settled, by the tasks that ended
    bad = spark.sparkContext.accumulator(0)

    def figures() -> str:
        seconds = time.monotonic() - started
        return f"{done.value:,} rows, {done.value / seconds:,.0f} rows/s, {bad.value:,} rejected"

    with cli.progress(spark, "bulk_load", figures):
        totals = load_all(spark, args, limits, lambda n, rejected: (done.add(n), bad.add(rejected)))
    counts = dict.fromkeys(KINDS, 0)
    by_reason: dict[str, int] = {}
    for kind, reason, n in totals:
        if kind == "reason":
            by_reason[reason] = n
            counts["rejected"] += n
        else:
            counts[kind] += n
    seconds = time.monotonic() - started
    total = sum(counts.values())
    cli.emit(
        {
            "rows": total,
            **counts,
            "by_reason": dict(sorted(by_reason.items(), key=lambda kv: -kv[1])),
            "seconds": round(seconds, 3),
            "rows_per_s": round(total / seconds) if seconds else 0,
        }
    )
    return cli.EXIT_OK


def load_all(
    spark: Any, args: Any, limits: Limits, settled: Callable[[int, int], object]
) -> list[Any]:
    """Load the input, write the rejects; the (kind, reason, count) totals. ``settled(rows,
    rejected)`` is called in the tasks (an accumulator's add) as their rows settle."""
    df = read_input(spark, args.input, args.format)
    fields = len([c for c in df.columns if c != CORRUPT])
    rows = with_items(prepare(df, args.topic, string_maps=True), limits.settings)
    target = Target(args.url, args.api_key, limits.settings, args.format, fields, limits.max_batch)
    schema = result_schema(rows)
    own = [f.name for f in schema.fields[3:]]

    def load(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark.sql.pandas.types import to_arrow_schema

        for batch in load_partition(target, numbered(batches), to_arrow_schema(schema)):
            kinds = batch.column("kind").to_pylist()
            n = batch.column("count").to_pylist()
            settled(
                sum(c for k, c in zip(kinds, n, strict=True) if k != "rejected"),
                kinds.count("rejected"),
            )
            yield batch

    results = rows.mapInArrow(load, schema).persist()
    try:
        counted = results.where("kind != 'rejected'").groupBy("kind", "reason").sum("count")
        totals: list[Any] = [tuple(row) for row in counted.collect()]  # the load runs here
        rejects = results.where("kind = 'rejected'").select(*own)
        if any(PLACE in (reason or "") for _, reason, _ in totals):  # rows that conflict
            before = place_offsets(df)
            totals = [(k, reason and numbered_reason(reason, before), n) for k, reason, n in totals]
            rejects = rejects.withColumn(
                REJECT_REASON, numbered_column(rejects[REJECT_REASON], before)
            )
        # A null column is left out of its line: a malformed line's reject is its raw
        # text and the reason, not the columns Spark could not fill.
        rejects.write.mode("overwrite").json(args.rejects)
    except Exception as exc:
        refused = _refusal(exc)
        if refused is None:
            raise
        raise cli.JobError(refused) from None
    finally:
        results.unpersist()
    return totals


def _string_map(kind: Any) -> bool:
    """``kind`` is a map of strings."""
    from pyspark.sql import types as T

    return (
        isinstance(kind, T.MapType)
        and isinstance(kind.keyType, T.StringType)
        and isinstance(kind.valueType, T.StringType)
    )


def _refusal(exc: Exception) -> str | None:
    """A ServiceRefused raised in an executor, as its one line (Spark wraps it)."""
    marker = f"{ServiceRefused.__name__}: "
    for line in str(exc).splitlines():
        if marker in line:
            return line.split(marker, 1)[1]
    return None


if __name__ == "__main__":
    cli.main(run)
