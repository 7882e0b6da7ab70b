"""``python -m pipeline.bulk_load``: validate rows with the service's own checks, send the
valid ones through the batch API from the executors, write the rest as rejects.

Every row ends as exactly one of loaded (201), already_present (200: this id was sent
before, by an earlier run or a retried task) or rejected (a check here or the service
refused the item), so ``loaded + already_present + rejected == rows``.
"""

from __future__ import annotations

import csv
import http.client
import os
import queue
import time
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from app.config import Settings
from app.defaults import MAX_BATCH
from app.schemas import MSG_ID_PATTERN
from pipeline import cli
from pipeline.rows import COLUMNS, Message, Reject, to_message
from pipeline.sender import BatchSender, ServiceRefused

FORMATS = ("parquet", "csv", "json")
ORDINAL = "__rt_ordinal"  # internal columns, named so no input column can clash
CONFLICT = "__rt_conflict"
CORRUPT = "_corrupt_record"  # Spark's column for a line it could not parse
_HASH, _KEY, _POS = "__rt_hash", "__rt_key", "__rt_pos"
_FIRST_POS, _FIRST_HASH, _DIFFER = "__rt_first_pos", "__rt_first_hash", "__rt_differ"
REQUEST_SLACK_BYTES = 64 * 1024  # under the service's request limit, for the envelope
KINDS = ("loaded", "already_present", "rejected")
IN_FLIGHT = 2  # batches a task has on their way at once (one connection each)


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


def prepare(df: Any, topic: str | None) -> Any:
    """Check the columns, make them Arrow-friendly, number identical id-less rows, and mark
    each row whose msg_id an earlier row of the input has with other content (its row)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    unknown = sorted(set(df.columns) - set(COLUMNS) - {CORRUPT})
    if unknown:
        raise cli.JobError(f"unknown column(s) {', '.join(unknown)}; expected {', '.join(COLUMNS)}")
    if "body" not in df.columns:
        raise cli.JobError("missing column body")
    if "topic" not in df.columns and topic is None:
        raise cli.JobError("missing column topic (or give --topic)")
    if topic is not None:
        present = F.col("topic").cast("string") if "topic" in df.columns else F.lit(None)
        df = df.withColumn("topic", F.coalesce(present, F.lit(topic)))
    keep = (T.StringType, T.IntegralType, T.FractionalType, T.BooleanType)
    for field in df.schema.fields:
        if isinstance(field.dataType, T.MapType | T.StructType | T.ArrayType):
            df = df.withColumn(field.name, F.to_json(field.name))
        elif not isinstance(field.dataType, keep):
            df = df.withColumn(field.name, F.col(field.name).cast("string"))
    content = [c for c in df.columns if c != CORRUPT]
    return _number_copies(F, df, content)


def _number_copies(F: Any, df: Any, content: list[str]) -> Any:
    """Add ``ORDINAL`` (the k-th of identical rows without a msg_id: their ids differ by
    it) and ``CONFLICT`` (for a row whose msg_id an earlier row has with other content,
    that row's number: 1 = the first data row, in the order Spark reads the input, a single
    file's own order).

    One aggregation over the input finds both: rows keyed by (topic, msg_id), or by their
    content when they have no msg_id, and the keys that occur more than once (few, kept
    for the main pass). Only when some msg_id has two contents does a count per input
    partition turn positions into row numbers."""
    from pyspark.sql import Window

    has_id = F.lit(False)
    if "msg_id" in df.columns:
        # An id the service refuses is that row's reject, whatever other rows hold.
        has_id = F.coalesce(F.col("msg_id").cast("string").rlike(MSG_ID_PATTERN), F.lit(False))
        no_id = F.coalesce(F.col("msg_id").cast("string"), F.lit("")) == ""
    else:
        no_id = F.lit(True)
    digest = F.xxhash64(*content, *[F.col(c).isNull() for c in content])
    df = (
        df.withColumn(_POS, F.monotonically_increasing_id())
        .withColumn(_HASH, digest)
        .withColumn(
            _KEY,
            F.when(has_id, F.col("msg_id").cast("string")).when(
                no_id, F.concat(F.lit("\x00"), F.col(_HASH).cast("string"))
            ),
        )
    )
    repeated = (
        df.where(F.col(_KEY).isNotNull())
        .groupBy("topic", _KEY)
        .agg(
            F.count(F.lit(1)).alias("_n"),
            F.min(_POS).alias(_FIRST_POS),
            F.min_by(_HASH, _POS).alias(_FIRST_HASH),
            (F.min(_HASH) != F.max(_HASH)).alias(_DIFFER),
        )
        .where("_n > 1")
        .drop("_n")
        .persist()
    )
    number = F.lit(None).cast("long")
    if repeated.where(_DIFFER).limit(1).count():
        # A row's number from its position: the rows of the partitions before its own,
        # plus its index in its partition (monotonically_increasing_id keeps the partition
        # above bit 33).
        offsets: list[Any] = []
        total = 0
        for p, n in sorted(df.groupBy(F.shiftright(_POS, 33).alias("p")).count().collect()):
            offsets += [F.lit(p), F.lit(total)]
            total += n
        first = F.element_at(F.create_map(*offsets), F.shiftright(F.col(_FIRST_POS), 33))
        number = first + F.col(_FIRST_POS).bitwiseAND(F.lit((1 << 33) - 1)) + 1
    df = df.join(repeated, ["topic", _KEY], "left")
    conflict = F.when(F.col(_DIFFER) & (F.col(_HASH) != F.col(_FIRST_HASH)), number)
    df = df.withColumn(CONFLICT, conflict.cast("long"))
    # Identical rows without a msg_id are told apart by their rank among themselves (their
    # order does not matter: they are identical). Only those few rows are sorted.
    copies = F.col(_FIRST_POS).isNotNull() & no_id
    rank = F.row_number().over(Window.partitionBy("topic", _KEY).orderBy(_POS)) - 1
    single = df.where(~copies).withColumn(ORDINAL, F.lit(0))
    many = df.where(copies).withColumn(ORDINAL, rank)
    internal = (_POS, _HASH, _KEY, _FIRST_POS, _FIRST_HASH, _DIFFER)
    return single.unionByName(many).drop(*internal)


@dataclass(frozen=True)
class Target:
    """Where and how the executors send (pickled to them)."""

    url: str
    api_key: str | None
    settings: Settings
    fmt: str = "parquet"  # the input's format, for the reason a line did not parse
    fields: int = 0  # a CSV header's number of fields


class Tally:
    """What one task did: counts per (kind, reason) and one JSON line per reject."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str | None]] = Counter()
        self.lines: list[str] = []

    def reject(self, row: dict[str, Any], field: str, reason: str) -> None:
        self.counts["rejected", f"{field}: {reason}"] += 1
        line = {**row, "reject_field": field, "reject_reason": reason}
        self.lines.append(orjson.dumps(line, default=str).decode())

    def drain(self) -> dict[str, list[Any]]:
        """The rows of RESULT_SCHEMA so far (and forget them)."""
        # loaded/already_present counts; a row per reject (its line); a row per reason
        rows: list[tuple[str, str | None, int, str | None]] = [
            (kind if kind != "rejected" else "reason", reason, n, None)
            for (kind, reason), n in self.counts.items()
        ]
        rows += [("rejected", None, 1, line) for line in self.lines]
        self.counts.clear()
        self.lines = []
        kinds, reasons, counts, lines = (
            (list(column) for column in zip(*rows, strict=True)) if rows else ([], [], [], [])
        )
        return {"kind": kinds, "reason": reasons, "count": counts, "line": lines}


RESULT_DDL = "kind string, reason string, count long, line string"
Sent = tuple[dict[str, Any], int | None]  # a row on its way, and the deliver time it fixes


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
        self.limit = target.settings.max_request_bytes - REQUEST_SLACK_BYTES
        self._batches: dict[str, tuple[list[bytes], list[Sent], list[int]]] = {}
        self._in_flight = in_flight
        self._pool = ThreadPoolExecutor(in_flight, thread_name_prefix="bulk-load-send")
        self._senders: queue.SimpleQueue[BatchSender] = queue.SimpleQueue()
        self._made: list[BatchSender] = []
        self._sent: deque[tuple[Future[list[dict[str, Any]]], list[Sent]]] = deque()

    def add(self, row: dict[str, Any], now_ms: int) -> None:
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
                row, "msg_id", f"conflicts with row {conflict}: same msg_id, other content"
            )
            return
        self._queue(result, row)

    def _queue(self, message: Message, row: dict[str, Any]) -> None:
        encoded = orjson.dumps(message.item)
        items, rows, size = self._batches.setdefault(message.topic, ([], [], [0]))
        if items and size[0] + len(encoded) > self.limit:
            self.flush(message.topic)
            items, rows, size = self._batches.setdefault(message.topic, ([], [], [0]))
        items.append(encoded)
        # The deliver time a row fixes (not one relative to now): a stored message with
        # this id and another time is not this row.
        rows.append((row, message.item.get("deliver_at_ms")))
        size[0] += len(encoded) + 1
        if len(items) >= MAX_BATCH:
            self.flush(message.topic)

    def flush(self, topic: str | None = None) -> None:
        """Send the batch of ``topic`` (of every topic if None); waits for the oldest batch
        on its way when ``in_flight`` are."""
        for name in [topic] if topic is not None else list(self._batches):
            items, rows, _ = self._batches.pop(name, ([], [], [0]))
            if not items:
                continue
            while len(self._sent) >= self._in_flight:
                self._settle(*self._sent.popleft())
            self._sent.append((self._pool.submit(self._send, name, items), rows))

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

    def _send(self, topic: str, items: list[bytes]) -> list[dict[str, Any]]:
        """On a pool thread: one request on a connection no other thread uses meanwhile."""
        try:
            sender = self._senders.get_nowait()
        except queue.Empty:
            sender = BatchSender(self.target.url, self.target.api_key)
            self._made.append(sender)
        try:
            return sender.send(topic, items)
        finally:
            self._senders.put(sender)

    def _settle(self, pending: Future[list[dict[str, Any]]], rows: list[Sent]) -> None:
        for result, (row, due) in zip(pending.result(), rows, strict=True):
            status = result["status"]
            if status == 201:
                self.tally.counts["loaded", None] += 1
            elif status == 200 and due is not None and result.get("deliver_at_ms") != due:
                stored = result.get("deliver_at_ms")
                self.tally.reject(
                    row,
                    "msg_id",
                    f"differs from the stored message: due at {stored}, this row at {due} (200)",
                )
            elif status == 200:
                self.tally.counts["already_present", None] += 1
            else:
                field, reason = _split(str(result.get("error") or f"HTTP {status}"))
                self.tally.reject(row, field, f"{reason} ({status})")


def _split(error: str) -> tuple[str, str]:
    """The service's ``field: reason`` item error → (field, reason); msg_id for conflicts."""
    field, sep, reason = error.partition(": ")
    if sep and field.isidentifier():
        return field, reason
    return "msg_id", error


def load_partition(target: Target, batches: Iterator[Any]) -> Iterator[Any]:
    """mapInArrow body: Arrow batches of input rows in, Arrow batches of RESULT rows out."""
    import pyarrow as pa

    schema = pa.schema(
        [
            ("kind", pa.string()),
            ("reason", pa.string()),
            ("count", pa.int64()),
            ("line", pa.string()),
        ]
    )
    loader = Loader(target)
    try:
        for batch in batches:
            now_ms = time.time_ns() // 1_000_000
            for row in batch.to_pylist():
                loader.add(row, now_ms)
            yield pa.RecordBatch.from_pydict(loader.tally.drain(), schema=schema)
        loader.finish()
        yield pa.RecordBatch.from_pydict(loader.tally.drain(), schema=schema)
    finally:
        loader.close()


def spread(spark: Any, df: Any, rows: Any) -> Any:
    """``rows`` in at least as many partitions as the cluster runs tasks at once: a file
    under 128 MB is one partition, one task, one core, whatever the cluster has."""
    parallelism = spark.sparkContext.defaultParallelism
    if df.rdd.getNumPartitions() >= parallelism:
        return rows
    return rows.repartition(parallelism)


def preflight(url: str, api_key: str | None) -> None:
    """Exit 2 now, not in every executor, if the service is unreachable or refuses the key:
    an empty batch is refused (422) only after the key was accepted."""
    sender = BatchSender(url, api_key)
    parts = urlsplit(url)
    try:
        status, _, _data = sender._post(
            f"{parts.path.rstrip('/')}/v1/topics/preflight/messages/batch", b'{"messages":[]}'
        )
    except (OSError, http.client.HTTPException) as exc:
        raise cli.JobError(f"cannot reach the service at {url}: {exc}") from None
    finally:
        sender.close()
    if status in (401, 403):
        raise cli.JobError(f"the service at {url} refused the API key ({status})")


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
    preflight(args.url, args.api_key)
    started = time.monotonic()
    spark = cli.session(args.master, "bulk_load")
    done = spark.sparkContext.accumulator(0)  # rows settled, by the tasks that ended
    bad = spark.sparkContext.accumulator(0)

    def figures() -> str:
        seconds = time.monotonic() - started
        return f"{done.value:,} rows, {done.value / seconds:,.0f} rows/s, {bad.value:,} rejected"

    with cli.progress(spark, "bulk_load", figures):
        df = read_input(spark, args.input, args.format)
        fields = len([c for c in df.columns if c != CORRUPT])
        target = Target(args.url, args.api_key, Settings(), args.format, fields)
        rows = spread(spark, df, prepare(df, args.topic))

        def load(batches: Iterator[Any]) -> Iterator[Any]:
            for batch in load_partition(target, batches):
                kinds = batch.column("kind").to_pylist()
                n = batch.column("count").to_pylist()
                done.add(sum(c for k, c in zip(kinds, n, strict=True) if k != "rejected"))
                bad.add(kinds.count("rejected"))
                yield batch

        results = rows.mapInArrow(load, RESULT_DDL)
        results = results.persist()
        try:
            results.where("kind = 'rejected'").select("line").write.mode("overwrite").text(
                args.rejects
            )
            totals = (
                results.where("kind != 'rejected'").groupBy("kind", "reason").sum("count").collect()
            )
        except Exception as exc:
            refused = _refusal(exc)
            if refused is None:
                raise
            raise cli.JobError(refused) from None
        finally:
            results.unpersist()
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


def _refusal(exc: Exception) -> str | None:
    """A ServiceRefused raised in an executor, as its one line (Spark wraps it)."""
    marker = f"{ServiceRefused.__name__}: "
    for line in str(exc).splitlines():
        if marker in line:
            return line.split(marker, 1)[1]
    return None


if __name__ == "__main__":
    cli.main(run)
