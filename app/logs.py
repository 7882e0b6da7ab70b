"""Logging set-up: one handler on stderr, as text for people or JSON lines for machines
(``ROCKTIMER_LOG_FORMAT``). uvicorn's own loggers go through the same handler."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# What every LogRecord has: the rest of a record's attributes came from ``extra=`` and go
# into the JSON object as fields of their own (an access line's method, path, status, ms).
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and any extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def configure(level: str, fmt: str) -> None:
    """Log at ``level`` (debug, info, warning, error) as ``fmt`` (text or json)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
