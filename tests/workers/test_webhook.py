"""The pure rules of webhooks (workers/rules/webhook.py), by table."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from pydantic import ValidationError

from workers.rules.retry import GroupSettings
from workers.rules.webhook import (
    ACKED,
    FAILED,
    MAX_RETRY_DELAY_MS,
    PushSettings,
    Verdict,
    allowed_hosts,
    host_allowed,
    retry_after_ms,
    signature,
    verdict,
)

NOW = 1_700_000_000_000  # Tue, 14 Nov 2023 22:13:20 GMT


def test_the_signature_is_the_documented_hmac() -> None:
    body = b'{"msg_id":"m"}'
    expected = hmac.new(b"k", b"1700000000000." + body, hashlib.sha256).hexdigest()
    assert signature("k", NOW, body) == f"t=1700000000000,v1={expected}"


@pytest.mark.parametrize(
    ("status", "retry_after", "expected"),
    [
        (200, None, ACKED),
        (204, "5", ACKED),
        (299, None, ACKED),
        (301, None, FAILED),  # redirects are not followed
        (400, "5", FAILED),  # Retry-After only counts on 429 and 503
        (500, None, FAILED),
        (429, None, FAILED),  # no header: the group's policy
        (429, "7", Verdict(False, 7_000)),
        (503, "0", Verdict(False, 0)),
        (503, "Tue, 14 Nov 2023 22:13:50 GMT", Verdict(False, 30_000)),
        (503, "Tue, 14 Nov 2023 22:00:00 GMT", Verdict(False, 0)),  # past: at once
        (429, "soon", FAILED),  # unreadable: the group's policy
        (429, "99999999999", Verdict(False, MAX_RETRY_DELAY_MS)),
    ],
)
def test_what_a_reply_means(status: int, retry_after: str | None, expected: Verdict) -> None:
    assert verdict(status, retry_after, NOW) == expected


def test_retry_after_absent_is_none() -> None:
    assert retry_after_ms(None, NOW) is None


@pytest.mark.parametrize(
    ("setting", "host", "allowed"),
    [
        ("127.0.0.1,localhost", "localhost", True),
        ("127.0.0.1,localhost", "LOCALHOST", True),
        ("127.0.0.1, localhost", "10.0.0.1", False),
        ("*.example.com", "hooks.example.com", True),
        ("*.example.com", "example.com", False),
        ("*.example.com", "evilexample.com", False),
        ("*", "anything.at.all", True),
        ("", "localhost", False),
    ],
)
def test_allowed_hosts(setting: str, host: str, allowed: bool) -> None:
    assert host_allowed(host, allowed_hosts(setting)) is allowed


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1/x",
        "http:///x",
        "http://u:p@127.0.0.1/x",
        "http://127.0.0.1:99999/x",
        "127.0.0.1/x",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ValidationError, match="url"):
        PushSettings(url=url)


def test_the_secret_is_write_only_and_kept_by_a_put_without_one() -> None:
    stored = GroupSettings(push=PushSettings(url="http://localhost/a", secret="s"))
    assert stored.shown()["push"]["secret"] is None
    assert GroupSettings().shown()["push"] is None
    renamed = GroupSettings(push=PushSettings(url="http://localhost/b"))
    kept = renamed.keeping_secret(stored)
    assert kept.push is not None
    assert (kept.push.url, kept.push.secret) == ("http://localhost/b", "s")
    replaced = GroupSettings(push=PushSettings(url="http://localhost/b", secret="t"))
    assert replaced.keeping_secret(stored) == replaced
    assert GroupSettings().keeping_secret(stored).push is None  # push: null drops it


@pytest.mark.parametrize(
    ("url", "stored"),
    [
        ("http://127.0.0.1:18202/漢", "http://127.0.0.1:18202/%E6%BC%A2"),
        ("http://127.0.0.1/a b", "http://127.0.0.1/a%20b"),
        ("http://127.0.0.1/a%20b/%zz", "http://127.0.0.1/a%20b/%25zz"),  # escapes kept
        ("HTTP://LocalHost/x?q=a b&r=é#frag", "http://localhost/x?q=a%20b&r=%C3%A9"),
        ("http://漢字.example/x", "http://xn--p8s937b.example/x"),
        ("http://[0:0::1]:8080", "http://[::1]:8080/"),
        ("https://h.example:443/a/b;c=d", "https://h.example:443/a/b;c=d"),
    ],
)
def test_a_push_url_is_stored_as_a_request_line_can_carry_it(url: str, stored: str) -> None:
    assert PushSettings(url=url).url == stored


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:0/x",
        "http://127.0.0.1/a\r\nX-Injected: 1",
        "http://127.0.0.1/a\x00",
        "http://127.0.0.1%0d/x",
        "http://a..b/x",
        "http://[zz]/x",
        "http://[::1%25eth0]/x",
        "http://127.0.0.1/" + "漢" * 700,  # over the length once encoded
    ],
)
def test_a_push_url_no_request_line_can_carry_is_refused(url: str) -> None:
    with pytest.raises(ValidationError, match="url"):
        PushSettings(url=url)
