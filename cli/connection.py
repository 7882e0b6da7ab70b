"""The generated client set up from the command line, and every outcome as an exit code."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import IntEnum
from http import HTTPStatus
from typing import Any, TypeVar

import httpx
import orjson
from rocktimer_client import Client
from rocktimer_client.errors import UnexpectedStatus
from rocktimer_client.models import Problem
from rocktimer_client.types import Response

from app import defaults

DEFAULT_URL = defaults.URL
T = TypeVar("T")
CONNECT_TIMEOUT_S = 5.0
READ_MARGIN_S = 10.0  # beyond the longest long poll (30 s) before a read times out
LONGEST_POLL_S = defaults.RECEIVE_WAIT_MS_MAX / 1000


class Exit(IntEnum):
    """What scripts can rely on (``rocktimer --help`` lists them)."""

    OK = 0
    REFUSED = 1  # not found, conflict, or some items of a batch failed
    USAGE = 2  # a bad flag or argument, or input the server refused as invalid
    UNREACHABLE = 3  # no server at the URL (refused, timed out, unknown host)
    DENIED = 4  # 401/403: no API key, an unknown one, or one without the role
    UNAVAILABLE = 5  # 429/503/5xx: the server is overloaded or failing; retry later
    INTERRUPTED = 130  # Ctrl+C (128 + SIGINT, as shells report it)


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


class NoStream(Exception):
    """The server has no streaming receive (one from before it): poll instead."""


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
            raise self._unreachable(exc) from None
        except UnexpectedStatus as exc:
            raise self._failure(exc.status_code, exc.content) from None
        parsed = reply.parsed
        if isinstance(parsed, Problem):
            raise self._refused(parsed)
        if parsed is None:
            raise Failed(Exit.UNAVAILABLE, f"{reply.status_code}: a reply that does not parse")
        return reply.status_code, parsed

    def call(self, operation: Callable[..., Response[T | Problem]], *args: Any, **kwargs: Any) -> T:
        """Run a generated ``sync_detailed`` operation: its parsed reply, or Failed."""
        return self.reply(operation, *args, **kwargs)[1]

    def events(self, path: str, params: dict[str, int]) -> Iterator[dict[str, Any]]:
        """The messages of a server-sent event stream as they come (keep-alives skipped);
        Failed as ``reply``, NoStream if the server has no such stream (404)."""
        try:
            with self.client.get_httpx_client().stream("GET", path, params=params) as r:
                if r.status_code == 404:
                    raise NoStream(path)
                if r.status_code != 200:
                    raise self._failure(r.status_code, r.read())
                event = ""
                for line in r.iter_lines():
                    if line.startswith("event: "):
                        event = line[len("event: ") :]
                    elif line.startswith("data: ") and event == "message":
                        yield orjson.loads(line[len("data: ") :])
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    def _refused(self, problem: Problem) -> Failed:
        """A problem document as one line: its status, title and detail (which names the
        field at fault); a 404 that names nothing is a path the server does not serve."""
        line = f"{problem.status} {problem.title}"
        if problem.detail and problem.detail != problem.title:
            line += f": {problem.detail}"
        code = exit_for(problem.status)
        if problem.status == 404 and problem.detail == HTTPStatus.NOT_FOUND.phrase:
            line += f": not a route of the server at {self.url} (is --url its base URL?)"
            code = Exit.USAGE
        return Failed(code, line, problem.to_dict())

    def _failure(self, status: int, content: bytes) -> Failed:
        """A reply the generated client did not parse: its problem if it is one, else its
        status in words (the body is no rocktimer reply: not worth printing)."""
        try:
            problem = Problem.from_dict(orjson.loads(content))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            phrase = _phrase(status)
            return Failed(
                exit_for(status),
                f"{status} {phrase}: not a rocktimer reply (is --url {self.url} right?)",
            )
        return self._refused(problem)

    def _unreachable(self, exc: httpx.TransportError) -> Failed:
        reason = str(exc) or type(exc).__name__
        return Failed(
            Exit.UNREACHABLE,
            f"cannot reach {self.url}: {reason} (is the server running? see --url)",
        )


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown Status"
