from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="FixedPolicy")


@_attrs_define
class FixedPolicy:
    """The same wait before every retry (RocketMQ's ordered consumption).

    Attributes:
        policy (Literal['fixed']):
        interval_ms (int | Unset):  Default: 10000.
    """

    policy: Literal["fixed"]
    interval_ms: int | Unset = 10000

    def to_dict(self) -> dict[str, Any]:
        policy = self.policy

        interval_ms = self.interval_ms

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "policy": policy,
            }
        )
        if interval_ms is not UNSET:
            field_dict["interval_ms"] = interval_ms

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        policy = cast(Literal["fixed"], d.pop("policy"))
        if policy != "fixed":
            raise ValueError(f"policy must match const 'fixed', got '{policy}'")

        interval_ms = d.pop("interval_ms", UNSET)

        fixed_policy = cls(
            policy=policy,
            interval_ms=interval_ms,
        )

        return fixed_policy
