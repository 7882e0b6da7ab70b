"""The bulk loader's items built in Spark SQL (pipeline/items.py) against the service's
checks (``rows.to_message``): over a table of good and bad rows, a row the SQL passes is
one the service accepts, with the same item and the same content id; every other row
goes through ``to_message`` and only those do."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pyarrow as pa
import pytest

from app.config import Settings
from pipeline import bulk_load
from pipeline.items import DUE, ITEM, with_items
from pipeline.rows import Message, Reject, to_message

HOUR_MS = 3_600_000
# Small limits, so each edge is a short row: 64-byte bodies, 2 properties, 30 days ahead.
SETTINGS = Settings(max_body_bytes=64, max_properties=2, max_delay_ms=30 * 24 * HOUR_MS)
NOW_MS = time.time_ns() // 1_000_000
TEXT_SCHEMA = (
    "topic string, msg_id string, body string, body_encoding string, properties string, "
    "tag string, deliver_at_ms string, delay_ms string, delay_level string, "
    "deliver_at string, timezone string"
)
TYPED_SCHEMA = (
    "topic string, msg_id string, body string, body_encoding string, "
    "properties map<string,string>, tag string, deliver_at_ms long, delay_ms long, "
    "delay_level int, deliver_at string, timezone string"
)
SOON = NOW_MS + HOUR_MS
NY = "America/New_York"

# (row, the SQL builds its item): rows in text columns, as a CSV gives them.
TEXT_ROWS: list[tuple[dict[str, Any], bool]] = [
    ({"body": "plain"}, True),
    ({"body": "plain"}, True),  # an identical copy: its own id (ordinal 1)
    ({"msg_id": "m-1", "body": "x", "delay_ms": "60000"}, True),
    ({"msg_id": "a.b:c_d-e", "body": "x"}, True),
    ({"body": "x", "deliver_at_ms": str(SOON)}, True),
    ({"body": "x", "deliver_at_ms": "0"}, True),
    ({"body": "x", "delay_level": "3"}, True),
    ({"body": "x", "delay_ms": "0012"}, True),
    ({"body": "x", "delay_ms": str(SETTINGS.max_delay_ms)}, True),
    ({"body": "x", "tag": "email"}, True),
    ({"body": "x", "tag": "t" * 128}, True),
    ({"body": "x", "body_encoding": "utf8"}, True),
    ({"body": "aGVsbG8=", "body_encoding": "base64"}, True),
    ({"body": "QR==", "body_encoding": "base64"}, True),
    ({"body": "", "body_encoding": "base64"}, True),
    ({"body": "A" * 84 + "==", "body_encoding": "base64"}, False),  # 84 chars: 63 bytes
    ({"body": "A" * 88, "body_encoding": "base64"}, False),  # 66 bytes: over
    ({"body": "A" * 84 + "AA==", "body_encoding": "base64"}, True),  # 64 bytes
    ({"body": "b" * 64}, True),
    ({"body": "é" * 32}, True),  # 64 bytes
    ({"body": "é" * 33}, False),  # 66 bytes: over the limit
    ({"body": ""}, True),
    ({"body": 'üñí 😀 \u2028 " \\ / \t\n\r\b\f \x7f \x80'}, True),
    ({"body": "vertical\x0btab"}, True),  # Spark escapes it \u000B, orjson \u000b
    ({"body": "\\u001F text, \x1f \\\x1b"}, True),  # and a backslash, then "u001F"
    ({"msg_id": "esc", "body": "\x1e"}, True),
    ({"body": "x", "properties": '{"b":"2","a":"1"}'}, True),
    ({"body": "x", "properties": "{}"}, True),
    ({"body": "x", "properties": '{"k":"' + "v" * 4080 + '"}'}, True),
    ({"body": "x", "properties": '{"k":"' + "v" * 4096 + '"}'}, False),  # valid: over 4096 B
    ({"body": "x", "properties": '{"k":"' + "v" * 4097 + '"}'}, False),
    ({"body": "x", "properties": '{"a":"1","b":"2","c":"3"}'}, False),
    ({"body": "x", "properties": '{ "a": "1" }'}, False),  # valid, not as Spark writes it
    ({"body": "x", "properties": '{"a":"1","a":"2"}'}, True),  # the last, as orjson reads it
    ({"body": "x", "properties": '{"a":1}'}, False),
    ({"body": "x", "properties": '{"a":null}'}, False),
    ({"body": "x", "properties": "[1]"}, False),
    ({"body": "x", "properties": "not json"}, False),
    ({"body": "x", "deliver_at": "2027-03-14T02:30:00", "timezone": NY}, True),  # the gap
    ({"body": "x", "deliver_at": "2027-11-07T01:30:00", "timezone": NY}, True),  # overlap
    ({"body": "x", "deliver_at": "2026-02-30T09:00:00", "timezone": NY}, True),
    ({"body": "x", "deliver_at": "2027-01-01T09:00:00", "timezone": "Mars/Olympus_Mons"}, True),
    ({"body": "x", "deliver_at": "2027-01-01T09:00:00"}, True),
    ({"body": "x", "deliver_at": "0001-01-01T00:00:00", "timezone": "Asia/Tokyo"}, True),
    ({"body": "x", "deliver_at": "1969-12-31T23:00:00", "timezone": "UTC"}, True),
    ({"body": "x", "deliver_at": "2027-01-01T09:00", "timezone": "Europe"}, True),
    ({"body": "x", "deliver_at": "2099-01-01T09:00:00", "timezone": NY}, True),  # too far
    ({"body": "x", "timezone": NY}, False),
    ({"body": "x", "deliver_at": "2027-01-01T09:00:00", "timezone": NY, "delay_ms": "5"}, False),
    ({"body": "x", "deliver_at_ms": str(NOW_MS + 2 * SETTINGS.max_delay_ms)}, True),
    ({"body": "x", "deliver_at_ms": "-1"}, False),
    ({"body": "x", "deliver_at_ms": str(SOON), "delay_ms": "5"}, False),
    ({"body": "x", "delay_ms": str(SETTINGS.max_delay_ms + 1)}, False),
    ({"body": "x", "delay_ms": "1.5"}, False),
    ({"body": "x", "delay_ms": "soon"}, False),
    ({"body": "x", "delay_ms": " 7 "}, False),  # to_message strips it: valid
    ({"body": "x", "delay_ms": "99999999999999999999"}, False),
    ({"body": "x", "delay_level": "0"}, False),
    ({"body": "x", "delay_level": "19"}, False),
    ({"body": "x", "delay_level": "18"}, True),  # 2 h: within 30 days
    ({"msg_id": "bad id", "body": "x"}, False),
    ({"msg_id": ".", "body": "x"}, False),
    ({"msg_id": "..", "body": "x"}, False),
    ({"msg_id": "ends\n", "body": "x"}, False),
    ({"msg_id": "m" * 129, "body": "x"}, False),
    ({"topic": "bad topic!", "body": "x"}, False),
    ({"topic": "%DLQ%t-1", "body": "x"}, False),
    ({"topic": "%RETRY%g", "body": "x"}, False),
    ({"topic": "t-1\n", "body": "x"}, False),
    ({"topic": " t-2 ", "body": "x"}, False),  # to_message strips it: valid
    ({"topic": "a%b|c", "body": "x"}, True),
    ({"body": None}, False),
    ({"body": "not base64!", "body_encoding": "base64"}, False),
    ({"body": "QQ", "body_encoding": "base64"}, False),
    ({"body": "QQ=", "body_encoding": "base64"}, False),
    ({"body": "Q===", "body_encoding": "base64"}, False),
    ({"body": "QQ==QQ==", "body_encoding": "base64"}, False),
    ({"body": "x", "body_encoding": "utf16"}, False),
    ({"body": "x", "tag": "a b"}, False),
    ({"body": "x", "tag": "a|b"}, False),
    ({"body": "x", "tag": "a*"}, False),
    ({"body": "x", "tag": "t" * 129}, False),
    ({"body": "x", "tag": "bell\x07"}, False),
    ({"body": "x", "tag": "ünï"}, False),  # valid: Python checks it
    ({"msg_id": "twice", "body": "first"}, True),
    ({"msg_id": "twice", "body": "other content"}, False),  # conflicts with the row above
]

# The same in typed columns, as Parquet gives them (a map of properties, longs).
TYPED_ROWS: list[tuple[dict[str, Any], bool]] = [
    ({"body": "x", "deliver_at_ms": SOON, "properties": {"z": "1", "a": "2"}}, True),
    ({"body": "x", "delay_ms": HOUR_MS, "properties": {}}, True),
    ({"body": "x", "delay_level": 18, "tag": "sms"}, True),
    ({"body": "x", "delay_ms": -5}, False),
    ({"body": "x", "delay_level": 0}, False),
    ({"body": "x", "deliver_at_ms": -1}, False),
    ({"body": "x", "properties": {"a": None}}, False),
    ({"body": "x", "properties": {"a": "1", "b": "2", "c": "3"}}, False),
    ({"body": "x", "properties": {"ключ": "значение", "é": "\u2028"}}, True),
    ({"body": "x", "deliver_at": "2027-06-01T09:00:00", "timezone": "Asia/Kolkata"}, True),
]


# Columns of other types, as JSON Lines may give them: a number for a topic is its text
# to the service; any other non-text value is the service's to refuse (or read).
OTHER_SCHEMA = "topic long, msg_id long, body string, tag boolean, delay_ms double"
OTHER_ROWS: list[tuple[dict[str, Any], bool]] = [
    ({"topic": 5, "body": "x"}, True),
    ({"topic": 6, "body": "x", "msg_id": 7}, False),
    ({"topic": 6, "body": "x", "tag": True}, False),
    ({"topic": 6, "body": "x", "delay_ms": 60000.0}, False),  # a whole number: valid
    ({"topic": 6, "body": "x", "delay_ms": 1.5}, False),
]
NUMBER_BODY_SCHEMA = "topic string, body long, body_encoding long"
NUMBER_BODY_ROWS: list[tuple[dict[str, Any], bool]] = [
    ({"body": 5}, False),
    ({"body": 6, "body_encoding": 1}, False),
]


def _unique(rows: list[tuple[dict[str, Any], bool]]) -> list[tuple[dict[str, Any], bool]]:
    """The rows with each body "x" made its own ("x0", "x1", …): a row is found by its body."""
    return [
        ({**row, "body": f"x{i}"} if row.get("body") == "x" else row, fast)
        for i, (row, fast) in enumerate(rows)
    ]


TEXT_ROWS, TYPED_ROWS, OTHER_ROWS = _unique(TEXT_ROWS), _unique(TYPED_ROWS), _unique(OTHER_ROWS)


def _frame(spark: Any, rows: list[tuple[dict[str, Any], bool]], schema: str) -> Any:
    names = [part.split(" ")[0] for part in schema.split(", ")]
    data = [tuple({"topic": "t-1", **row}.get(n) for n in names) for row, _ in rows]
    return spark.createDataFrame(data, schema)


def _arrow(spark: Any, df: Any) -> pa.Table:
    """The rows as the loader's tasks get them: prepared, with their items, in one task."""
    rows = with_items(bulk_load.prepare(df, None, tasks=1, string_maps=True), SETTINGS)
    table: pa.Table = rows.mapInArrow(
        bulk_load.numbered, bulk_load.numbered_schema(rows.schema)
    ).toArrow()
    return table


def _verdicts(table: pa.Table) -> Iterator[tuple[dict[str, Any], Any, Message | Reject]]:
    """Each row (as ``to_message`` reads it), what the SQL and the executor's own checks
    made of it (the item and deliver time, or None), and ``to_message``'s verdict."""
    latest = NOW_MS + SETTINGS.max_delay_ms
    for row in table.to_pylist():
        item, due = row.pop(ITEM), row.pop(DUE)
        ordinal = row.pop(bulk_load.ORDINAL) or 0
        conflict = row.pop(bulk_load.CONFLICT)
        expected = to_message(dict(row), NOW_MS, SETTINGS, ordinal)
        if conflict is not None:  # the loader sends no item of it (``add_ready``)
            expected, item = Reject("msg_id", "conflict"), None
        ready = None
        if item is not None:
            ready = bulk_load.ready_item(
                row["topic"], item, due, ordinal, row.get("deliver_at"), row.get("timezone"), latest
            )
            assert ready is not None or not isinstance(expected, Message), row
        yield row, (item, ready), expected


@pytest.mark.parametrize(
    ("rows", "schema"),
    [
        (TEXT_ROWS, TEXT_SCHEMA),
        (TYPED_ROWS, TYPED_SCHEMA),
        (OTHER_ROWS, OTHER_SCHEMA),
        (NUMBER_BODY_ROWS, NUMBER_BODY_SCHEMA),
    ],
)
def test_an_item_built_in_sql_is_the_services_item_with_the_same_id(
    spark: Any, rows: list[tuple[dict[str, Any], bool]], schema: str
) -> None:
    table = _arrow(spark, _frame(spark, rows, schema))
    by_body: dict[Any, list[bool]] = {}
    for row, (item, ready), expected in _verdicts(table):
        by_body.setdefault((row["body"], row.get("msg_id"), row["topic"]), []).append(
            item is not None
        )
        if ready is None:
            continue  # to_message's to decide (its verdict is what the loader takes)
        assert isinstance(expected, Message), (row, expected)
        assert expected.topic == str(row["topic"])
        assert orjson.loads(ready[0]) == expected.item, row
        assert ready[1] == expected.item.get("deliver_at_ms")
    # Every row the table says the SQL builds, it does (and no other).
    wrong = [
        (row, fast)
        for row, fast in rows
        if fast not in by_body[row.get("body"), row.get("msg_id"), row.get("topic", "t-1")]
    ]
    assert wrong == []


def test_the_sql_passes_no_row_the_service_refuses(spark: Any) -> None:
    """Every row to_message rejects has no item, or fails what the executor checks."""
    table = _arrow(spark, _frame(spark, TEXT_ROWS + TEXT_ROWS, TEXT_SCHEMA))
    refused = 0
    for row, (_item, ready), expected in _verdicts(table):
        if isinstance(expected, Reject):
            refused += 1
            assert ready is None, (row, expected)
    assert refused >= 40


class _Receiver:
    """A local batch API that answers 201 to every item and keeps the items it got."""

    def __init__(self) -> None:
        self.items: dict[str, list[dict[str, Any]]] = {}
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                topic = self.path.split("/")[3]
                sent = orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.items.setdefault(topic, []).extend(sent["messages"])
                body = orjson.dumps({"results": [{"status": 201}] * len(sent["messages"])})
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> _Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_only_the_rows_without_an_item_go_through_the_services_checks(spark: Any) -> None:
    """A task sends exactly to_message's items (the same ids) and runs to_message for the
    rows the SQL left to it, and no other."""
    table = _arrow(spark, _frame(spark, TEXT_ROWS, TEXT_SCHEMA))
    verdicts = list(_verdicts(table))
    unbuilt = sum(1 for _, (item, ready), _ in verdicts if ready is None)
    built = len(verdicts) - unbuilt
    assert built >= 20
    assert unbuilt >= 30
    expected = sorted(
        orjson.dumps(m.item, option=orjson.OPT_SORT_KEYS)
        for _, _, m in verdicts
        if isinstance(m, Message)
    )
    with _Receiver() as receiver:
        target = bulk_load.Target(receiver.url, None, SETTINGS)
        loader = bulk_load.Loader(target)
        try:
            for batch in table.to_batches():
                loader.add_batch(batch, NOW_MS)
            loader.finish()
        finally:
            loader.close()
    assert loader.checked == unbuilt
    got = sorted(
        orjson.dumps(item, option=orjson.OPT_SORT_KEYS)
        for items in receiver.items.values()
        for item in items
    )
    assert got == expected
    counts = loader.tally.counts
    assert counts["loaded", None] == len(expected)
    assert sum(counts.values()) == len(verdicts)
