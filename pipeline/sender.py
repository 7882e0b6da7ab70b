"""The batch API from an executor: one keep-alive connection, ``Retry-After`` on 429/503,
exponential back-off on connection errors."""

from __future__ import annotations

import http.client
import random
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

import orjson

# RocketMQ's client retry policy (ExponentialBackoffRetryPolicy): 1 s, x1.6, 20 % jitter,
# at most 120 s between tries.
BACKOFF_INITIAL_S = 1.0
BACKOFF_MULTIPLIER = 1.6
BACKOFF_JITTER = 0.2
BACKOFF_CAP_S = 120.0
GIVE_UP_AFTER_S = 900.0  # one request waiting this long in all fails the task (and the job)
TIMEOUT_S = 120.0  # one request; a durable batch of 1000 is far below it
RETRYABLE = (429, 503)


def backoff_s(attempt: int, rng: random.Random) -> float:
    """The wait before try ``attempt + 1`` after ``attempt`` failed ones (attempt >= 1)."""
    base = min(BACKOFF_CAP_S, BACKOFF_INITIAL_S * BACKOFF_MULTIPLIER ** (attempt - 1))
    return base * (1 + rng.uniform(-BACKOFF_JITTER, BACKOFF_JITTER))


def retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` in seconds (the service sends delta-seconds), None if absent/bad."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


class ServiceRefused(Exception):
    """The service refused a whole request for a reason a retry cannot fix (401, 413, …)."""


class BatchSender:
    """POSTs batches to ``{url}/v1/topics/{topic}/messages/batch``; returns item results."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        parts = urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._conn: http.client.HTTPConnection | None = None

    def post(self, topic: str, items: list[bytes]) -> bytes:
        """``items``: each message already JSON-encoded; the answer's bytes (a 200's:
        ``{"results": [...]}``, its item results in order: ``results_of``)."""
        path = f"{self._prefix}/v1/topics/{quote(topic, safe='')}/messages/batch"
        body = b'{"messages":[' + b",".join(items) + b"]}"
        failures, waited = 0, 0.0
        while True:
            try:
                status, retry_after, data = self._post(path, body)
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                failures += 1
                waited = self._wait(waited, backoff_s(failures, self._rng), f"connection: {exc}")
                continue
            if status == 200:
                return data
            if status in RETRYABLE or status >= 500:
                failures += 1
                wait = retry_after_s(retry_after) if status in RETRYABLE else None
                wait = backoff_s(failures, self._rng) if wait is None else wait
                waited = self._wait(waited, wait, f"HTTP {status}")
                continue
            raise ServiceRefused(f"the service answered {status}: {_detail(data)}")

    def _post(self, path: str, body: bytes) -> tuple[int, str | None, bytes]:
        return self._request("POST", path, body)

    def _get(self, path: str) -> tuple[int, str | None, bytes]:
        return self._request("GET", path, None)

    def _request(self, method: str, path: str, body: bytes | None) -> tuple[int, str | None, bytes]:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=TIMEOUT_S)
        self._conn.request(method, path, body, self._headers)
        response = self._conn.getresponse()
        return response.status, response.getheader("Retry-After"), response.read()

    def _wait(self, waited: float, seconds: float, why: str) -> float:
        """Sleep ``seconds`` unless one request has waited too long in all; returns the total."""
        if waited + seconds > GIVE_UP_AFTER_S:
            raise ServiceRefused(f"gave up after {waited:.0f} s of retries ({why})")
        self._sleep(seconds)
        return waited + seconds

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def results_of(answer: bytes) -> list[dict[str, Any]]:
    """The item results of a batch's 200 answer."""
    results: list[dict[str, Any]] = orjson.loads(answer)["results"]
    return results


def _detail(data: bytes) -> str:
    try:
        problem = orjson.loads(data)
        return str(problem.get("detail") or problem.get("title"))
    except (orjson.JSONDecodeError, AttributeError):
        return data[:200].decode(errors="replace")
