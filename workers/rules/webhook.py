"""Webhooks, the pure part: a group's push settings, the signature, which hosts a push may
reach, and what a receiver's reply means (ack, or a failed attempt and its delay).

A push group's messages are POSTed by the service itself (app/push/pusher.py); everything here
is a function of its arguments, tested by table (tests/workers/test_webhook.py).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from email.utils import parsedate_to_datetime
from typing import Annotated, NamedTuple
from urllib.parse import quote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

SIGNATURE_HEADER = "Rocktimer-Signature"
DEFAULT_TIMEOUT_MS = 10_000
DEFAULT_MAX_IN_FLIGHT = 16
DEFAULT_ALLOWED_HOSTS = "127.0.0.1,localhost"  # api.md: ROCKTIMER_PUSH_ALLOWED_HOSTS
MAX_URL_LENGTH = 2_048  # what browsers and most proxies take
# The longest any retry waits: a retry policy's delays (workers/rules/retry.py) and a receiver's
# Retry-After are cut to it. A week: retries are for transient failures.
MAX_RETRY_DELAY_MS = 7 * 24 * 3_600_000
RETRY_AFTER_STATUSES = frozenset({429, 503})  # api.md: Retry-After is honoured on these


class PushSettings(BaseModel):
    """A group's push delivery: each message is POSTed to ``url`` as JSON."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    url: Annotated[
        str,
        Field(
            min_length=8,
            max_length=MAX_URL_LENGTH,
            description="http(s) URL on a host of ROCKTIMER_PUSH_ALLOWED_HOSTS",
        ),
    ]
    secret: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=1_024,
            description="HMAC-SHA256 key of the Rocktimer-Signature header; write-only "
            "(read back as null; a PUT without one keeps the one stored)",
        ),
    ] = None
    timeout_ms: Annotated[
        int, Field(ge=1_000, le=60_000, description="A reply later than this fails the attempt")
    ] = DEFAULT_TIMEOUT_MS
    max_in_flight: Annotated[int, Field(ge=1, le=1_000, description="POSTs under way at once")] = (
        DEFAULT_MAX_IN_FLIGHT
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        return push_url(url)

    @property
    def host(self) -> str:
        return (urlsplit(self.url).hostname or "").lower()

    def shown(self) -> dict[str, object]:
        """As a GET shows it: the secret is write-only."""
        return {**self.model_dump(mode="json"), "secret": None}


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HOST_NAME = re.compile(r"[a-z0-9_.-]+")
_LONE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# RFC 3986 characters a path (and a query, with "?") may carry as they are; "%" starts an
# escape (a lone one is escaped itself). Everything else is percent-encoded (UTF-8).
_PATH_SAFE = "/:@!$&'()*+,;=%"
_QUERY_SAFE = _PATH_SAFE + "?"


def _escaped(part: str, safe: str) -> str:
    return quote(_LONE_PERCENT.sub("%25", part), safe=safe)


def push_url(url: str) -> str:
    """A push url as it is stored and requested: http(s), a host name (IDNA, lower case) or
    an IP address, a port from 1 to 65535, the path and query percent-encoded (RFC 3986:
    a space or a non-ASCII character becomes its UTF-8 escapes), no fragment (it is never
    sent). Raises ValueError, saying what is wrong, for what no request line could carry:
    control characters, user info, a bad host or port.

    Every byte of the request head the push client writes comes from this form, so a url
    cannot split the request line or inject a header."""
    if _CONTROL.search(url):
        raise ValueError("must not contain control characters (tab, CR, LF, NUL …)")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # a bracketed host that is no IPv6 address
        raise ValueError(f"is not a valid URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry a user name or password")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("has a bad port (it takes 1 to 65535)") from None
    if port == 0:
        raise ValueError("has port 0 (it takes 1 to 65535)")
    host = parts.hostname
    if parts.netloc.startswith("["):
        try:
            if "%" in host:  # a zone: no meaning beyond this machine's interfaces
                raise ValueError
            host = f"[{ipaddress.IPv6Address(host).compressed}]"
        except ValueError:
            raise ValueError(f"has a bad IPv6 address {host!r}") from None
    else:
        try:
            host = host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise ValueError(f"has a host {host!r} that is not a valid domain name") from None
        if not _HOST_NAME.fullmatch(host):
            raise ValueError(f"has a host {host!r} that is not a valid domain name")
    authority = host if port is None else f"{host}:{port}"
    path = _escaped(parts.path, _PATH_SAFE) or "/"
    query = f"?{_escaped(parts.query, _QUERY_SAFE)}" if parts.query else ""
    stored = f"{scheme}://{authority}{path}{query}"
    if len(stored) > MAX_URL_LENGTH:
        raise ValueError(f"is over {MAX_URL_LENGTH} characters once percent-encoded")
    return stored


def allowed_hosts(setting: str) -> frozenset[str]:
    """``ROCKTIMER_PUSH_ALLOWED_HOSTS``: names joined by commas; ``*.example.com`` for its
    subdomains, ``*`` for any host."""
    return frozenset(h.strip().lower() for h in setting.split(",") if h.strip())


def host_allowed(host: str, allowed: frozenset[str]) -> bool:
    host = host.lower()
    if host in allowed or "*" in allowed:
        return True
    return any(rule.startswith("*.") and host.endswith(rule[1:]) for rule in allowed)


def signature(secret: str, t_ms: int, body: bytes) -> str:
    """The Rocktimer-Signature header's value: ``t=<ms>,v1=<hex HMAC-SHA256(secret,
    "<t>.<raw body>")>``, Stripe's layout."""
    mac = hmac.new(secret.encode(), b"%d." % t_ms + body, hashlib.sha256).hexdigest()
    return f"t={t_ms},v1={mac}"


def retry_after_ms(value: str | None, now_ms: int) -> int | None:
    """A Retry-After header (delay-seconds or an HTTP date) as a delay in ms; None when
    absent or unreadable (the group's retry policy applies then)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return min(int(value) * 1_000, MAX_RETRY_DELAY_MS)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110: an HTTP date is GMT
        return None
    return min(max(int(when.timestamp() * 1_000) - now_ms, 0), MAX_RETRY_DELAY_MS)


class Verdict(NamedTuple):
    """What a receiver's reply means for the message."""

    ok: bool  # acked
    delay_ms: int | None = None  # a failed attempt's: Retry-After's, None: the group's policy


ACKED = Verdict(True)
FAILED = Verdict(False)  # no reply in time, a refused connection, a reply we cannot read


def verdict(status: int, retry_after: str | None, now_ms: int) -> Verdict:
    """2xx acks; anything else is a failed attempt, delayed by Retry-After on 429/503."""
    if 200 <= status < 300:
        return ACKED
    if status in RETRY_AFTER_STATUSES:
        return Verdict(False, retry_after_ms(retry_after, now_ms))
    return FAILED
