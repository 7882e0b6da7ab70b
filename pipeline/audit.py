"""``python -m pipeline.audit``: the service's promises, checked on its own event log.

A message is one incarnation of a msg_id: (partition, topic, msg_id, created_at_ms), its
events ordered by seq (numbered per partition of the data dir). Every event of
a message carries its creation time, and once retention has swept a delivered message its
msg_id is free: a later send with it is a new message, not a second delivery of the first.

Per message:
- ``duplicate_delivery``: delivered more than once;
- ``delivered_after_cancel``: a delivery after its cancel;
- ``early_delivery``: delivered before its deliver time;
- ``overdue``: neither delivered nor cancelled, due more than ``--grace-ms`` before the
  newest event in the log (the log's "now": segments are sealed every few seconds);
- ``never_scheduled``: delivered with no ``scheduled`` event, though it was created after
  the log's first event (so the event cannot have been retired yet);
- with ``--input``: ``not_scheduled``, a row bulk_load would send with no event at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson

from app.config import Settings
from pipeline import cli
from pipeline.bulk_load import CONFLICT, CORRUPT, FORMATS, ORDINAL, numbered, prepare, read_input
from pipeline.events import PARTITION, read_events
from pipeline.rows import Message, to_message

DEFAULT_GRACE_MS = 60_000
FINDING_DDL = "kind string, topic string, msg_id string, detail string"


# One message: a msg_id's incarnation, in its partition of the data dir (a DLQ topic is
# kept in each partition its messages came from; seq is numbered per partition).
KEY = (PARTITION, "topic", "msg_id", "created_at_ms")


def per_message(F: Any, ev: Any) -> Any:
    """One row per message (``KEY``) with what the checks need."""
    msg = ev.where(F.col("kind").isin("scheduled", "rescheduled", "cancelled", "delivered"))
    is_ = {k: F.col("kind") == k for k in ("scheduled", "cancelled", "delivered")}
    due_event = F.col("kind").isin("scheduled", "rescheduled")
    return msg.groupBy(*KEY).agg(
        F.count(F.when(is_["scheduled"], 1)).alias("scheduled"),
        F.count(F.when(is_["delivered"], 1)).alias("delivered"),
        F.max_by(F.col("deliver_at_ms"), F.when(due_event, F.col("seq"))).alias("due_ms"),
        F.min(F.when(is_["cancelled"], F.col("seq"))).alias("cancel_seq"),
        F.max(F.when(is_["delivered"], F.col("seq"))).alias("last_delivery_seq"),
        F.min(F.when(is_["delivered"], F.col("event_time_ms") - F.col("deliver_at_ms"))).alias(
            "lead_ms"
        ),
        F.min(F.when(is_["delivered"], F.col("event_time_ms"))).alias("delivered_ms"),
    )


def findings(spark: Any, ev: Any, grace_ms: int) -> tuple[Any, Any]:
    """(findings DataFrame, messages DataFrame) of the log."""
    from pyspark.sql import functions as F

    # Each partition's log starts where its own retention left it; "now" is the newest event.
    bounds = ev.groupBy(PARTITION).agg(F.min("event_time_ms"), F.max("event_time_ms")).collect()
    now_ms = max((b[2] for b in bounds), default=0)
    starts = [x for b in bounds for x in (F.lit(b[0]), F.lit(b[1]))]
    start_ms = F.element_at(F.create_map(*starts), F.col(PARTITION)) if starts else F.lit(0)
    m = per_message(F, ev).cache()  # read by every check and counted: computed once
    due = F.coalesce(F.col("due_ms"), F.lit(None))
    checks = [
        (
            "duplicate_delivery",
            F.col("delivered") > 1,
            F.to_json(F.struct("delivered", "created_at_ms")),
        ),
        (
            "delivered_after_cancel",
            F.col("last_delivery_seq") > F.col("cancel_seq"),
            F.to_json(F.struct("cancel_seq", "last_delivery_seq")),
        ),
        (
            "early_delivery",
            F.col("lead_ms") < 0,
            F.to_json(F.struct(F.col("delivered_ms"), (-F.col("lead_ms")).alias("early_by_ms"))),
        ),
        (
            "overdue",
            (F.col("delivered") == 0) & F.col("cancel_seq").isNull() & (due + grace_ms < now_ms),
            F.to_json(
                F.struct(due.alias("deliver_at_ms"), (F.lit(now_ms) - due).alias("overdue_by_ms"))
            ),
        ),
        (
            "never_scheduled",
            (F.col("delivered") > 0)
            & (F.col("scheduled") == 0)
            & (F.col("created_at_ms") >= start_ms),
            F.to_json(F.struct("created_at_ms", "delivered_ms")),
        ),
    ]
    parts = [
        m.where(cond).select(F.lit(kind).alias("kind"), "topic", "msg_id", detail.alias("detail"))
        for kind, cond, detail in checks
    ]
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out, m


def _loaded_ids(target: Settings, batches: Iterator[Any]) -> Iterator[Any]:
    """mapInArrow body: the (topic, msg_id) bulk_load sends for each valid row."""
    import pyarrow as pa

    for batch in numbered(batches):
        topics, ids = [], []
        for row in batch.to_pylist():
            if row.pop(CORRUPT, None) is not None or row.pop(CONFLICT, None) is not None:
                continue  # a line that did not parse, an id with two contents: rejects
            ordinal = row.pop(ORDINAL, 0) or 0
            result = to_message(row, batch_now_ms(), target, ordinal)
            if isinstance(result, Message):
                topics.append(result.topic)
                ids.append(result.item["msg_id"])
        yield pa.RecordBatch.from_pydict({"topic": topics, "msg_id": ids})


def batch_now_ms() -> int:
    import time

    return time.time_ns() // 1_000_000


def run(argv: list[str]) -> int:
    p = cli.parser("audit", "Check the service's promises on its event log.")
    p.add_argument(
        "--events",
        required=True,
        help="the events directory (<data_dir>/events), or a data dir: every partition's log",
    )
    p.add_argument("--input", help="a bulk_load input: every valid row must have been scheduled")
    p.add_argument("--format", choices=FORMATS, help="the --input format")
    p.add_argument("--topic", help="as given to bulk_load, with --input")
    p.add_argument("--grace-ms", type=cli.positive_int, default=DEFAULT_GRACE_MS)
    args = p.parse_args(argv)
    if args.input is not None and args.format is None:
        raise cli.JobError("--input needs --format")
    cli.require_path(args.events, directory=True, master=args.master)
    if args.input is not None:
        cli.require_path(args.input, master=args.master)
    spark = cli.session(args.master, "audit")
    from pyspark.sql import functions as F

    by_kind: Counter[str] = Counter()
    with cli.progress(spark, "audit"):
        # Not cached: caching every event costs more than reading the segments again
        # (the log's bounds, the per-message table and --input's ids each read what they use).
        ev = read_events(spark, args.events)
        found, messages = findings(spark, ev, args.grace_ms)
        if args.input is not None:
            settings = Settings()
            rows = prepare(read_input(spark, args.input, args.format), args.topic)
            sent = rows.mapInArrow(
                lambda it: _loaded_ids(settings, it), "topic string, msg_id string"
            )
            known = ev.select("topic", "msg_id").distinct()
            missing = sent.join(known, ["topic", "msg_id"], "left_anti").select(
                F.lit("not_scheduled").alias("kind"), "topic", "msg_id", F.lit("{}").alias("detail")
            )
            found = found.unionByName(missing)
        for row in found.orderBy("kind", "topic", "msg_id").toLocalIterator():
            by_kind[row["kind"]] += 1
            detail = orjson.loads(row["detail"])
            line = {"kind": row["kind"], "topic": row["topic"], "msg_id": row["msg_id"], **detail}
            print(orjson.dumps(line).decode(), flush=False)
        n_messages = messages.count()
        messages.unpersist()
    total = sum(by_kind.values())
    cli.emit({"messages": n_messages, "findings": total, "by_kind": dict(sorted(by_kind.items()))})
    return cli.EXIT_FINDINGS if total else cli.EXIT_OK


if __name__ == "__main__":
    cli.main(run)
