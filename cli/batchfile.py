"""Messages to send from a file: JSON Lines (one send body per line) or CSV (a header row).

CSV columns: ``body`` (required), ``msg_id``, ``tag``, ``body_encoding``, ``delay_ms``,
``deliver_at_ms``, ``delay_level``; ``properties.NAME`` sets property NAME. An empty cell
is a field not given. Items are checked here only as far as the file's shape goes (JSON,
known fields); the server judges each item on its own and says why one fails.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from attrs import fields
from rocktimer_client.models import SendMessage

FIELDS = frozenset(f.name for f in fields(SendMessage))
INT_FIELDS = frozenset({"delay_ms", "deliver_at_ms", "delay_level"})
PROPERTY = "properties."
COLUMNS = ", ".join([*sorted(FIELDS - {"properties"}), PROPERTY + "NAME"])


class Item(NamedTuple):
    """One message of the file (``message``) or why its line cannot be one (``error``)."""

    line: int
    message: SendMessage | None
    error: str | None = None


def _message(line: int, doc: Any) -> Item:
    if not isinstance(doc, dict):
        return Item(line, None, "not a JSON object")
    unknown = sorted(set(doc) - FIELDS)
    if unknown:
        return Item(
            line, None, f"unknown field {unknown[0]!r} (fields: {', '.join(sorted(FIELDS))})"
        )
    if not isinstance(doc.get("body"), str):
        return Item(line, None, "body: a string is required")
    return Item(line, SendMessage.from_dict(doc))


def jsonl(lines: Iterable[str]) -> Iterator[Item]:
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            doc = json.loads(text)
        except ValueError as exc:
            yield Item(number, None, f"not JSON: {exc}")
            continue
        yield _message(number, doc)


def _cell(column: str, value: str) -> int | str:
    if column not in INT_FIELDS:
        return value
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{column}: {value!r} is not an integer") from None


def csv_rows(lines: Iterable[str]) -> Iterator[Item]:
    reader = csv.DictReader(lines)
    columns = reader.fieldnames or []
    unknown = [
        c for c in columns if c not in FIELDS - {"properties"} and not c.startswith(PROPERTY)
    ]
    if unknown or "body" not in columns:
        wrong = f"unknown column {unknown[0]!r}" if unknown else "no 'body' column"
        yield Item(1, None, f"{wrong} (columns: {COLUMNS})")
        return
    for row in reader:
        doc: dict[str, Any] = {}
        try:
            for column, value in row.items():
                if column is None:
                    raise ValueError("more cells than header columns")
                if value in (None, "") and column != "body":
                    continue
                if column.startswith(PROPERTY):
                    doc.setdefault("properties", {})[column[len(PROPERTY) :]] = value
                else:
                    doc[column] = _cell(column, value or "")
        except ValueError as exc:
            yield Item(reader.line_num, None, str(exc))
            continue
        yield _message(reader.line_num, doc)


def read(lines: Iterable[str], kind: str) -> Iterator[Item]:
    """``kind``: "jsonl" or "csv"."""
    return csv_rows(lines) if kind == "csv" else jsonl(lines)


def kind_of(name: str) -> str:
    return "csv" if name.lower().endswith(".csv") else "jsonl"
