"""How results are shown: rich text for people, or one JSON document per line (--json)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.times import when


def now_ms() -> int:
    """This machine's clock, for "in 5 s" / "3 min ago" (the server's clock decides)."""
    return time.time_ns() // 1_000_000


class Out:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.console = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)

    def json(self, doc: Any) -> None:
        sys.stdout.write(json.dumps(doc, ensure_ascii=False) + "\n")
        sys.stdout.flush()

    def say(self, text: str) -> None:
        self.console.print(text)

    def warn(self, text: str) -> None:
        self.err.print(text)

    def fields(self, doc: dict[str, Any]) -> None:
        """A record, one member a line; ``*_ms`` times shown with how far they are from now."""
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="dim")
        grid.add_column()
        now = now_ms()
        for key, value in doc.items():
            grid.add_row(key, escape(self._value(key, value, now)))
        self.console.print(grid)

    @staticmethod
    def _value(key: str, value: Any, now: int) -> str:
        if key.endswith("_at_ms") or key in ("next_visible_ms", "last_failure_ms"):
            return when(value, now)
        if isinstance(value, dict):
            return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        return str(value)

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        table = Table(*columns, box=None, header_style="bold", pad_edge=False)
        for row in rows:
            table.add_row(*(escape(str(cell)) for cell in row))
        self.console.print(table)


def count(n: int) -> str:
    """12 -> "12", 12_345 -> "12.3k", 1_234_567 -> "1.2M" (--json gives exact numbers)."""
    if n < 10_000:
        return str(n)
    text = str(n)
    for unit, size in (("k", 1e3), ("M", 1e6), ("G", 1e9)):
        text = f"{n / size:.1f}".removesuffix(".0") + unit
        if n / size < 999.95:
            break
    return text
