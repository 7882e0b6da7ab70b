"""Retry policies and group settings: pure functions of the retry number, tested by table.

Retry k (k = 1, 2, …) follows the k-th failed attempt. RocketMQ's consumer retry waits
delay level 2 + k of the delay-level table: 10 s, 30 s, 1 m, 2 m … 2 h, then 2 h.
"""

from __future__ import annotations

import functools
import logging
from typing import Annotated, Any, Literal

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo

from workers.rules import tagfilter
from workers.rules.tagfilter import EXPRESSION, MATCH_ALL
from workers.rules.webhook import MAX_RETRY_DELAY_MS, PushSettings

DELAY_LEVELS_MS = (
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000,
    360_000, 420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
)  # fmt: skip  # RocketMQ 4.x: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h

log = logging.getLogger("rocktimer")

DEFAULT_MAX_ATTEMPTS = 16  # RocketMQ's maxReconsumeTimes
MAX_ATTEMPTS_LIMIT = 64


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


RetryMs = Annotated[int, Field(ge=0, le=MAX_RETRY_DELAY_MS)]


class LevelsPolicy(_Strict):
    """RocketMQ's default: retry k waits delay level 2 + k (10 s, 30 s, 1 m … 2 h)."""

    policy: Literal["levels"] = "levels"


class ExponentialPolicy(_Strict):
    """initial_ms × multiplier^(k-1), capped at max_ms."""

    policy: Literal["exponential"]
    initial_ms: Annotated[int, Field(ge=1, le=MAX_RETRY_DELAY_MS)] = 1_000
    multiplier: Annotated[float, Field(ge=1.0, le=100.0, strict=False, allow_inf_nan=False)] = 2.0
    max_ms: Annotated[int, Field(ge=1, le=MAX_RETRY_DELAY_MS)] = 7_200_000


class FixedPolicy(_Strict):
    """The same wait before every retry (RocketMQ's ordered consumption)."""

    policy: Literal["fixed"]
    interval_ms: RetryMs = 10_000


RetryPolicy = Annotated[
    LevelsPolicy | ExponentialPolicy | FixedPolicy, Field(discriminator="policy")
]


STORED = {"stored": True}  # validation context of settings read back from the store


def _stored(info: ValidationInfo) -> bool:
    """Settings read back from the store: checked on their way in, under the rules of then;
    a rule added since must not make a stored group unreadable (its receives, its push)."""
    return isinstance(info.context, dict) and info.context.get("stored") is True


class GroupSettings(_Strict):
    """A consumer group's settings on one topic."""

    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS_LIMIT)] = DEFAULT_MAX_ATTEMPTS
    # A factory, not an instance: an object default in the schema breaks client generators.
    retry: RetryPolicy = Field(default_factory=LevelsPolicy)
    filter: Annotated[
        str,
        Field(
            max_length=4096,
            description='Tag expression: "*" or tags joined by "||", e.g. "TagA || TagB"',
            json_schema_extra={"pattern": EXPRESSION},  # checked in words by tagfilter.check
        ),
        AfterValidator(lambda f, info: f if _stored(info) else tagfilter.check(f)),
    ] = MATCH_ALL
    push: PushSettings | None = Field(
        None, description="POST each message to a URL instead of waiting for receives"
    )

    def shown(self) -> dict[str, Any]:
        """As GET shows it: a push secret is write-only."""
        out = self.model_dump(mode="json")
        if self.push is not None:
            out["push"] = self.push.shown()
        return out

    def keeping_secret(self, stored: GroupSettings) -> GroupSettings:
        """These settings to store over ``stored``: a push without a secret keeps the one
        stored (GET shows none, so a read-change-write must not drop it); ``push: null``
        drops it with the rest of the push."""
        if self.push is None or self.push.secret is not None or stored.push is None:
            return self
        return self.model_copy(
            update={"push": self.push.model_copy(update={"secret": stored.push.secret})}
        )


DEFAULT_SETTINGS = GroupSettings()


def retry_delay_ms(policy: LevelsPolicy | ExponentialPolicy | FixedPolicy, retry: int) -> int:
    """How long retry number ``retry`` (1-based) waits after the failed attempt."""
    if retry < 1:
        raise ValueError("retries are numbered from 1")
    if isinstance(policy, FixedPolicy):
        return policy.interval_ms
    if isinstance(policy, ExponentialPolicy):
        # Stop multiplying once past the cap: no float overflow for retry 10_000.
        delay = float(policy.initial_ms)
        for _ in range(retry - 1):
            delay *= policy.multiplier
            if delay >= policy.max_ms:
                return policy.max_ms
        return min(int(delay), policy.max_ms)
    level = min(retry + 2, len(DELAY_LEVELS_MS))  # 1-based level 2 + k, then the last
    return DELAY_LEVELS_MS[level - 1]


def encode_settings(settings: GroupSettings) -> bytes:
    return orjson.dumps(settings.model_dump(mode="json"))


def decode_settings(raw: bytes | None, where: str = "") -> GroupSettings:
    """A stored settings record; ``where``: its topic/group, for the log, when known."""
    if raw is None:
        return DEFAULT_SETTINGS
    try:
        return GroupSettings.model_validate_json(raw, context=STORED)
    except ValidationError:
        return _salvaged(raw, where)


@functools.lru_cache(maxsize=256)  # said once per distinct record, not at every read
def _salvaged(raw: bytes, where: str) -> GroupSettings:
    """A stored settings record that today's rules refuse (stored under looser ones, or
    damaged): the fields at fault take their defaults, the rest are kept. No stored value
    may stop a start, a worker or a group's receives; a PUT stores valid ones again."""
    try:
        return GroupSettings.model_validate_json(raw, context=STORED)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
    bad = sorted({str(e["loc"][0]) for e in errors if e["loc"]})
    try:
        found = orjson.loads(raw)
        kept = {k: v for k, v in found.items() if k not in bad} if isinstance(found, dict) else {}
        settings = GroupSettings.model_validate_json(orjson.dumps(kept), context=STORED)
    except (orjson.JSONDecodeError, ValidationError):
        bad, settings = ["every field"], DEFAULT_SETTINGS
    reasons = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}" for e in errors)
    log.warning(
        "stored settings of group %s are not valid (%s): %s taken at the default%s; PUT "
        "the group's settings to store valid ones",
        where or "(a group)",
        reasons,
        ", ".join(bad),
        " (not pushed)" if "push" in bad else "",
    )
    return settings


@functools.lru_cache(maxsize=tagfilter.PARSED_CACHE)
def stored_filter(raw: bytes | None) -> str:
    """The tag filter of a stored settings record, decoded once per distinct record (a
    receive reads it every time, a backlog too; validating the whole settings model each
    time cost more than the read)."""
    return decode_settings(raw).filter
