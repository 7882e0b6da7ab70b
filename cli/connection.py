"""The generated client set up from the command line, and every outcome as an exit code."""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Any, TypeVar

import httpx
from rocktimer_client import Client
from rocktimer_client.errors import UnexpectedStatus
from rocktimer_client.models import Problem
from rocktimer_client.types import Response

DEFAULT_URL = "http://127.0.0.1:8080"
T = TypeVar("T")
CONNECT_TIMEOUT_S = 5.0
READ_MARGIN_S = 10.0  # beyond the longest long poll (30 s) before a read times out
LONGEST_POLL_S = 30.0


class Exit(IntEnum):
    """What scripts can rely on (``rocktimer --help`` lists them)."""

    OK = 0
    REFUSED = 1  # not found, conflict, or some items of a batch failed
    USAGE = 2  # a bad flag or argument, or input the server refused as invalid
    UNREACHABLE = 3  # no server at the URL (refused, timed out, unknown host)
    DENIED = 4  # 401/403: no API key, an unknown one, or one without the role
    UNAVAILABLE = 5  # 429/503/5xx: the server is overloaded or failing; retry later


def exit_for(status: int) -> Exit:
    if status in (401, 403):
        return Exit.DENIED
    if status in (400, 413, 415, 422, 431):
        return Exit.USAGE
    if status == 429 or status >= 500:
        return Exit.UNAVAILABLE
    return Exit.REFUSED


class Failed(Exception):
    """An outcome other than success: one line on stderr, and its exit code."""

    def __init__(self, code: Exit, message: str, problem: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.exit_code = code
        self.problem = problem


class Api:
    """The generated client for one server; every call's outcome is its reply or Failed."""

    def __init__(self, url: str, api_key: str | None) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        timeout = httpx.Timeout(LONGEST_POLL_S + READ_MARGIN_S, connect=CONNECT_TIMEOUT_S)
        self.client = Client(
            base_url=self.url, headers=headers, timeout=timeout, raise_on_unexpected_status=True
        )

    def close(self) -> None:
        self.client.get_httpx_client().close()

    def reply(
        self, operation: Callable[..., Response[T | Problem]], *args: Any, **kwargs: Any
    ) -> tuple[int, T]:
        """Run a generated ``sync_detailed`` operation: (status, parsed reply), or Failed."""
        try:
            reply = operation(*args, client=self.client, **kwargs)
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise Failed(
                Exit.UNREACHABLE,
                f"cannot reach {self.url}: {reason} (is the server running? see --url)",
            ) from None
        except UnexpectedStatus as exc:
            text = exc.content.decode(errors="replace")[:200]
            raise Failed(exit_for(exc.status_code), f"{exc.status_code}: {text}") from None
        parsed = reply.parsed
        if isinstance(parsed, Problem):
            raise Failed(
                exit_for(parsed.status),
                f"{parsed.status} {parsed.title}: {parsed.detail}",
                parsed.to_dict(),
            )
        if parsed is None:
            raise Failed(Exit.UNAVAILABLE, f"{reply.status_code}: a reply that does not parse")
        return reply.status_code, parsed

    def call(self, operation: Callable[..., Response[T | Problem]], *args: Any, **kwargs: Any) -> T:
        """Run a generated ``sync_detailed`` operation: its parsed reply, or Failed."""
        return self.reply(operation, *args, **kwargs)[1]
