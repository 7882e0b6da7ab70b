"""Retry policies are pure functions of the retry number: table tests."""

from __future__ import annotations

import orjson
import pytest
from pydantic import ValidationError

from workers.rules.retry import (
    DEFAULT_SETTINGS,
    ExponentialPolicy,
    FixedPolicy,
    GroupSettings,
    LevelsPolicy,
    decode_settings,
    encode_settings,
    retry_delay_ms,
)

S = 1_000
M = 60 * S
H = 60 * M

# RocketMQ: retry k waits delay level 2 + k of 1s 5s 10s 30s 1m 2m ... 2h; beyond → 2h.
LEVELS = [
    (1, 10 * S), (2, 30 * S), (3, 1 * M), (4, 2 * M), (5, 3 * M), (6, 4 * M), (7, 5 * M),
    (8, 6 * M), (9, 7 * M), (10, 8 * M), (11, 9 * M), (12, 10 * M), (13, 20 * M),
    (14, 30 * M), (15, 1 * H), (16, 2 * H), (17, 2 * H), (100, 2 * H),
]  # fmt: skip


@pytest.mark.parametrize(("retry", "expected"), LEVELS)
def test_levels_policy_follows_rocketmq(retry: int, expected: int) -> None:
    assert retry_delay_ms(LevelsPolicy(), retry) == expected


@pytest.mark.parametrize(
    ("retry", "expected"),
    [(1, 100), (2, 160), (3, 256), (4, 409), (5, 655), (6, 1000), (7, 1000), (10_000, 1000)],
)
def test_exponential_policy_multiplies_and_caps(retry: int, expected: int) -> None:
    policy = ExponentialPolicy(policy="exponential", initial_ms=100, multiplier=1.6, max_ms=1000)
    assert retry_delay_ms(policy, retry) == expected


@pytest.mark.parametrize("retry", [1, 2, 16, 500])
def test_fixed_policy_is_fixed(retry: int) -> None:
    assert retry_delay_ms(FixedPolicy(policy="fixed", interval_ms=2_500), retry) == 2_500


def test_retries_count_from_one() -> None:
    with pytest.raises(ValueError, match="from 1"):
        retry_delay_ms(LevelsPolicy(), 0)


def test_defaults_are_rocketmqs() -> None:
    assert DEFAULT_SETTINGS.max_attempts == 16
    assert isinstance(DEFAULT_SETTINGS.retry, LevelsPolicy)
    assert decode_settings(None) == DEFAULT_SETTINGS


def test_settings_round_trip() -> None:
    s = GroupSettings(max_attempts=3, retry=FixedPolicy(policy="fixed", interval_ms=5))
    assert decode_settings(encode_settings(s)) == s


@pytest.mark.parametrize(
    "raw",
    [
        b'{"max_attempts": 0}',
        b'{"max_attempts": 65}',
        b'{"retry": {"policy": "sometimes"}}',
        b'{"retry": {"policy": "fixed", "interval_ms": -1}}',
        b'{"retry": {"policy": "exponential", "initial_ms": 0}}',
        b'{"retry": {"policy": "exponential", "multiplier": 0.5}}',
        b'{"retry": {"policy": "fixed", "initial_ms": 5}}',
        b'{"colour": 1}',
    ],
)
def test_bad_settings_are_refused(raw: bytes) -> None:
    with pytest.raises(ValidationError):
        GroupSettings.model_validate_json(raw)


def test_a_stored_record_that_no_longer_validates_keeps_its_valid_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = orjson.dumps({"max_attempts": 3, "push": {"url": "http://127.0.0.1:0/x"}})
    with caplog.at_level("WARNING", logger="rocktimer"):
        assert decode_settings(raw, "t/g") == GroupSettings(max_attempts=3)
        assert decode_settings(b"\xff junk", "t/h") == DEFAULT_SETTINGS
    said = caplog.text
    assert "group t/g are not valid" in said
    assert "not pushed" in said
    assert "group t/h are not valid" in said
