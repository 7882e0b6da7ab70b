"""``python -m pipeline.generate``: realistic input for bulk_load.

Row i is a pure function of (seed, i) (``xxhash64`` draws), so the same flags give the same
rows on any master and any number of partitions; every column is a Spark SQL expression
(the JVM builds the rows: no Python per row). The mix: bursts of rows due in the same
second, short delays and delay levels, long delays (months to years), "09:00 local" rows
with an IANA time zone, rows repeated verbatim (an export that overlaps itself), and
``--invalid-fraction`` rows the service refuses, each for one reason.
"""

from __future__ import annotations

import time
from typing import Any

from pipeline import cli

FORMATS = ("parquet", "csv", "json")
DUPLICATE_FRACTION = 0.02  # rows that repeat the row before them
WITH_ID_FRACTION = 0.8  # rows that carry their own msg_id (the rest get a content id)
BURSTS = 10  # distinct seconds the burst rows are due in, a minute apart
DAY_MS = 86_400_000
TIME_ZONES = (
    "America/New_York",
    "America/Los_Angeles",
    "America/Sao_Paulo",
    "Europe/London",
    "Europe/Berlin",
    "Asia/Kolkata",
    "Asia/Tokyo",
    "Australia/Sydney",
)
TAGS = ("email", "sms", "push")
# One reason each, in the service's words where the service decides.
INVALID_KINDS = (
    "msg_id",
    "topic",
    "delay_level",
    "two_schedules",
    "timezone",
    "base64",
    "too_far",
    "bad_date",
)
SCHEMA = (
    "topic string, msg_id string, body string, body_encoding string, {properties}, "
    "tag string, deliver_at_ms long, delay_ms long, delay_level int, deliver_at string, "
    "timezone string"
)
BURST_SPREAD_MS = 1000
MAX_LEVEL = 18


def rows_frame(
    spark: Any,
    rows: int,
    seed: int,
    topics: int,
    invalid_fraction: float,
    start_ms: int,
    csv: bool,
    partitions: int,
) -> tuple[Any, Any]:
    """(the rows as a DataFrame, its invalid rows' ids as one), all in Spark SQL: row i is a
    function of (seed, i) through ``xxhash64``, so any number of partitions on any master
    gives the same rows."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    def draw(of: Column, k: int) -> Column:
        """The k-th uniform draw in [0, 1) of row ``of``."""
        bits = F.shiftrightunsigned(F.xxhash64(F.lit(seed), of, F.lit(k)), 11)
        return bits.cast("double") * F.lit(2.0**-53)

    i = F.col("id")
    src = F.when((draw(i, 0) < DUPLICATE_FRACTION) & (i > 0), i - 1).otherwise(i).alias("src")
    base = spark.range(0, rows, numPartitions=partitions).select(src)
    s = F.col("src")
    u = [draw(s, k) for k in range(2, 10)]
    bad = draw(s, 1) < invalid_fraction
    second = start_ms - start_ms % 1000
    day = start_ms - start_ms % DAY_MS
    null_long, null_text = F.lit(None).cast("long"), F.lit(None).cast("string")

    def pick_(names: tuple[str, ...], at: Column) -> Column:
        return F.element_at(F.array(*[F.lit(n) for n in names]), at.cast("int") + 1)

    text_body = F.format_string('{"customer": %d, "template": "reminder-%d"}', s % 100_003, s % 17)
    b64 = u[2] < 0.05
    body = F.when(b64, F.base64(F.encode(text_body, "UTF-8"))).otherwise(text_body)
    burst = second + 60_000 * (1 + F.floor(u[6] * BURSTS)) + F.floor(u[7] * BURST_SPREAD_MS)
    long_delay = start_ms + F.floor(30 * DAY_MS + u[6] * 1800 * DAY_MS)
    local_day = F.to_date(F.timestamp_millis(F.lit(day) + (1 + F.floor(u[6] * 30)) * DAY_MS))
    p = u[5]
    cols: dict[str, Column] = {
        "topic": F.concat(F.lit("topic-"), F.floor(u[0] * u[0] * topics).cast("string")),
        "msg_id": F.when(u[1] < WITH_ID_FRACTION, F.concat(F.lit(f"order-{seed}-"), s)),
        "body": body,
        "body_encoding": F.when(b64, F.lit("base64")),
        "properties": F.when(
            u[4] < 0.3,
            F.create_map(
                F.lit("source"), F.lit("import"), F.lit("campaign"), F.concat(F.lit("c"), s % 7)
            ),
        ),
        "tag": F.when(u[3] < 0.5, pick_(TAGS, F.floor(u[3] * 6))),
        "deliver_at_ms": F.when(p < 0.35, burst).when((p >= 0.65) & (p < 0.80), long_delay),
        "delay_ms": F.when((p >= 0.35) & (p < 0.55), F.floor(u[6] * 3_600_000)),
        "delay_level": F.when((p >= 0.55) & (p < 0.65), 1 + F.floor(u[6] * MAX_LEVEL)),
        "deliver_at": F.when(
            p >= 0.80, F.concat(F.date_format(local_day, "yyyy-MM-dd"), F.lit("T09:00:00"))
        ),
        "timezone": F.when(p >= 0.80, pick_(TIME_ZONES, F.floor(u[7] * len(TIME_ZONES)))),
    }
    kind = pick_(INVALID_KINDS, F.floor(u[7] * len(INVALID_KINDS)))
    spoiled = _spoil(F, cols, kind, start_ms, null_long, null_text)
    out = {name: F.when(bad, spoiled[name]).otherwise(value) for name, value in cols.items()}
    if csv:
        out["properties"] = F.when(out["properties"].isNotNull(), F.to_json(out["properties"]))
    types = dict(item.split(" ") for item in _schema(csv).split(", "))
    frame = base.select(*[out[name].cast(types[name]).alias(name) for name in types])
    return frame, base.where(bad)


def _spoil(
    F: Any, cols: dict[str, Any], kind: Any, start_ms: int, null_long: Any, null_text: Any
) -> dict[str, Any]:
    """The columns of an invalid row: each kind breaks exactly one rule."""
    is_ = {k: kind == k for k in INVALID_KINDS}
    local = is_["timezone"] | is_["bad_date"]
    encoded = is_["base64"]
    keeps_schedule = local | encoded | is_["msg_id"] | is_["topic"]

    def kept(name: str, value: Any) -> Any:
        """The row's own value where its kind keeps the schedule, else ``value``."""
        return F.when(keeps_schedule, cols[name]).otherwise(value)

    return {
        "topic": F.when(is_["topic"], F.lit("bad topic!")).otherwise(cols["topic"]),
        "msg_id": F.when(is_["msg_id"], F.lit("has spaces in it")).otherwise(cols["msg_id"]),
        "body": F.when(encoded, F.lit("not base64!")).otherwise(cols["body"]),
        "body_encoding": F.when(encoded, F.lit("base64")).otherwise(cols["body_encoding"]),
        "properties": cols["properties"],
        "tag": cols["tag"],
        "deliver_at_ms": F.when(local, null_long)
        .when(is_["two_schedules"], F.lit(start_ms + 60_000))
        .when(is_["too_far"], F.lit(start_ms + 20 * 366 * DAY_MS))
        .otherwise(kept("deliver_at_ms", null_long)),
        "delay_ms": F.when(local, null_long)
        .when(is_["two_schedules"], F.lit(60_000))
        .otherwise(kept("delay_ms", null_long)),
        "delay_level": F.when(local, null_long)
        .when(is_["delay_level"], F.lit(99))
        .otherwise(kept("delay_level", null_long)),
        "deliver_at": F.when(is_["timezone"], F.lit("2026-06-01T09:00:00"))
        .when(is_["bad_date"], F.lit("2026-02-30T09:00:00"))
        .otherwise(kept("deliver_at", null_text)),
        "timezone": F.when(is_["timezone"], F.lit("Mars/Olympus_Mons"))
        .when(is_["bad_date"], F.lit("Europe/Berlin"))
        .otherwise(kept("timezone", null_text)),
    }


def _schema(csv: bool) -> str:
    return SCHEMA.format(properties="properties string" if csv else "properties map<string,string>")


def run(argv: list[str]) -> int:
    p = cli.parser("generate", "Write realistic input rows for bulk_load.")
    p.add_argument("--rows", required=True, type=cli.positive_int)
    p.add_argument("--out", required=True, help="directory to write (replaced)")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--invalid-fraction", type=cli.fraction, default=0.01)
    p.add_argument("--topics", type=cli.positive_int, default=4)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if args.topics < 1:
        raise cli.JobError("--topics must be at least 1")
    spark = cli.session(args.master, "generate")
    start_ms = time.time_ns() // 1_000_000
    parts = max(spark.sparkContext.defaultParallelism, args.rows // 1_000_000)
    with cli.progress(spark, "generate"):
        df, bad = rows_frame(
            spark,
            args.rows,
            args.seed,
            args.topics,
            args.invalid_fraction,
            start_ms,
            args.format == "csv",
            parts,
        )
        writer = df.write.mode("overwrite")
        if args.format == "csv":
            writer = writer.option("header", True).option("escape", '"')
        writer.format(args.format).save(args.out)
        invalid = bad.count()  # the same expression, on the draws alone: no columns built
    cli.emit({"rows": args.rows, "invalid": invalid, "path": args.out})
    return cli.EXIT_OK


if __name__ == "__main__":
    cli.main(run)
