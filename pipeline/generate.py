"""``python -m pipeline.generate``: realistic input for bulk_load.

Row i is a pure function of (seed, i) (splitmix64 draws), so the same flags give the same
rows on any master and any number of partitions. The mix: bursts of rows due in the same
second, short delays and delay levels, long delays (months to years), "09:00 local" rows
with an IANA time zone, rows repeated verbatim (an export that overlaps itself), and
``--invalid-fraction`` rows the service refuses, each for one reason.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

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
_M64 = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


def draws(ids: np.ndarray[Any, Any], seed: int, k: int) -> np.ndarray[Any, Any]:
    """Uniform floats in [0, 1): the k-th draw of each id (splitmix64 of seed, id, k)."""
    mix = np.uint64((seed * 0x632BE59BD9B4E019 + k * 0xD1B54A32D192ED03) & 0xFFFF_FFFF_FFFF_FFFF)
    x = ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + mix
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53


def sources(ids: np.ndarray[Any, Any], seed: int) -> np.ndarray[Any, Any]:
    """The row each id copies: itself, or the one before it (a duplicate)."""
    dup = (draws(ids, seed, 0) < DUPLICATE_FRACTION) & (ids > 0)
    return np.where(dup, ids - 1, ids)


def is_invalid(
    src: np.ndarray[Any, Any], seed: int, invalid_fraction: float
) -> np.ndarray[Any, Any]:
    return draws(src, seed, 1) < invalid_fraction


def make_rows(
    ids: np.ndarray[Any, Any],
    seed: int,
    topics: int,
    invalid_fraction: float,
    start_ms: int,
    csv: bool,
) -> dict[str, list[Any]]:
    """The columns of rows ``ids`` (see the module docstring for the mix)."""
    src = sources(ids, seed)
    bad = is_invalid(src, seed, invalid_fraction).tolist()
    u = [draws(src, seed, k).tolist() for k in range(2, 10)]
    cols: dict[str, list[Any]] = {
        name: []
        for name in (
            "topic",
            "msg_id",
            "body",
            "body_encoding",
            "properties",
            "tag",
            "deliver_at_ms",
            "delay_ms",
            "delay_level",
            "deliver_at",
            "timezone",
        )
    }
    second = start_ms - start_ms % 1000
    day = start_ms - start_ms % DAY_MS
    for j, s in enumerate(src.tolist()):
        r: dict[str, Any] = {
            "topic": f"topic-{int(u[0][j] ** 2 * topics)}",
            "msg_id": None,
            "body_encoding": None,
            "properties": None,
            "tag": None,
            "deliver_at_ms": None,
            "delay_ms": None,
            "delay_level": None,
            "deliver_at": None,
            "timezone": None,
        }
        if u[1][j] < WITH_ID_FRACTION:
            r["msg_id"] = f"order-{seed}-{s}"
        body = f'{{"customer": {s % 100_003}, "template": "reminder-{s % 17}"}}'
        if u[2][j] < 0.05:
            body, r["body_encoding"] = base64.b64encode(body.encode()).decode(), "base64"
        r["body"] = body
        if u[3][j] < 0.5:
            r["tag"] = TAGS[int(u[3][j] * 6)]
        if u[4][j] < 0.3:
            r["properties"] = {"source": "import", "campaign": f"c{s % 7}"}
        pick, v = u[5][j], u[6][j]
        if pick < 0.35:  # a burst: many rows due in the same second
            r["deliver_at_ms"] = second + 60_000 * (1 + int(v * BURSTS)) + int(u[7][j] * 1000)
        elif pick < 0.55:
            r["delay_ms"] = int(v * 3_600_000)
        elif pick < 0.65:
            r["delay_level"] = 1 + int(v * 18)
        elif pick < 0.80:  # long delays: a month to five years
            r["deliver_at_ms"] = start_ms + int(30 * DAY_MS + v * 1800 * DAY_MS)
        else:  # 09:00 in the recipient's own time zone, within the next month
            date = time.strftime("%Y-%m-%d", time.gmtime((day + (1 + int(v * 30)) * DAY_MS) / 1000))
            r["deliver_at"], r["timezone"] = f"{date}T09:00:00", TIME_ZONES[int(u[7][j] * 8)]
        if bad[j]:
            _spoil(r, INVALID_KINDS[int(u[7][j] * len(INVALID_KINDS))], start_ms)
        if csv and r["properties"] is not None:
            r["properties"] = f'{{"source": "import", "campaign": "c{s % 7}"}}'
        for name, value in r.items():
            cols[name].append(value)
    return cols


def _spoil(r: dict[str, Any], kind: str, start_ms: int) -> None:
    """Make row ``r`` invalid for exactly one reason."""
    if kind == "msg_id":
        r["msg_id"] = "has spaces in it"
    elif kind == "topic":
        r["topic"] = "bad topic!"
    elif kind == "timezone":
        r.update(
            deliver_at_ms=None,
            delay_ms=None,
            delay_level=None,
            deliver_at="2026-06-01T09:00:00",
            timezone="Mars/Olympus_Mons",
        )
    elif kind == "bad_date":
        r.update(
            deliver_at_ms=None,
            delay_ms=None,
            delay_level=None,
            deliver_at="2026-02-30T09:00:00",
            timezone="Europe/Berlin",
        )
    elif kind == "base64":
        r["body"], r["body_encoding"] = "not base64!", "base64"
    else:
        r.update(
            deliver_at=None, timezone=None, deliver_at_ms=None, delay_ms=None, delay_level=None
        )
        if kind == "delay_level":
            r["delay_level"] = 99
        elif kind == "two_schedules":
            r["deliver_at_ms"], r["delay_ms"] = start_ms + 60_000, 60_000
        else:  # too_far: twenty years, over the default ten-year maximum
            r["deliver_at_ms"] = start_ms + 20 * 366 * DAY_MS


def count_invalid(rows: int, seed: int, invalid_fraction: float) -> int:
    chunk = 1_000_000
    total = 0
    for first in range(0, rows, chunk):
        ids = np.arange(first, min(rows, first + chunk), dtype=np.int64)
        total += int(is_invalid(sources(ids, seed), seed, invalid_fraction).sum())
    return total


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
    csv = args.format == "csv"
    schema = SCHEMA.format(
        properties="properties string" if csv else "properties map<string,string>"
    )
    start_ms = time.time_ns() // 1_000_000
    seed, topics, fraction = args.seed, args.topics, args.invalid_fraction

    def generate(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        text = pa.string()
        target = pa.schema(
            [
                ("topic", text),
                ("msg_id", text),
                ("body", text),
                ("body_encoding", text),
                ("properties", text if csv else pa.map_(text, text)),
                ("tag", text),
                ("deliver_at_ms", pa.int64()),
                ("delay_ms", pa.int64()),
                ("delay_level", pa.int32()),
                ("deliver_at", text),
                ("timezone", text),
            ]
        )
        for batch in batches:
            ids = batch.column(0).to_numpy()
            yield pa.RecordBatch.from_pydict(
                make_rows(ids, seed, topics, fraction, start_ms, csv), schema=target
            )

    parts = max(spark.sparkContext.defaultParallelism, args.rows // 1_000_000)
    with cli.progress(spark, "generate"):
        df = spark.range(0, args.rows, numPartitions=parts).mapInArrow(generate, schema)
        writer = df.write.mode("overwrite")
        if csv:
            writer = writer.option("header", True).option("escape", '"')
        writer.format(args.format).save(args.out)
    invalid = count_invalid(args.rows, args.seed, args.invalid_fraction)
    cli.emit({"rows": args.rows, "invalid": invalid, "path": args.out})
    return cli.EXIT_OK


if __name__ == "__main__":
    cli.main(run)
