from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="ExponentialPolicy")


@_attrs_define
class ExponentialPolicy:
    """initial_ms × multiplier^(k-1), capped at max_ms.

    Attributes:
        policy (Literal['exponential']):
        initial_ms (int | Unset):  Default: 1000.
        multiplier (float | Unset):  Default: 2.0.
        max_ms (int | Unset):  Default: 7200000.
    """

    policy: Literal["exponential"]
    initial_ms: int | Unset = 1000
    multiplier: float | Unset = 2.0
    max_ms: int | Unset = 7200000

    def to_dict(self) -> dict[str, Any]:
        policy = self.policy

        initial_ms = self.initial_ms

        multiplier = self.multiplier

        max_ms = self.max_ms

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "policy": policy,
            }
        )
        if initial_ms is not UNSET:
            field_dict["initial_ms"] = initial_ms
        if multiplier is not UNSET:
            field_dict["multiplier"] = multiplier
        if max_ms is not UNSET:
            field_dict["max_ms"] = max_ms

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        policy = cast(Literal["exponential"], d.pop("policy"))
        if policy != "exponential":
            raise ValueError(f"policy must match const 'exponential', got '{policy}'")

        initial_ms = d.pop("initial_ms", UNSET)

        multiplier = d.pop("multiplier", UNSET)

        max_ms = d.pop("max_ms", UNSET)

        exponential_policy = cls(
            policy=policy,
            initial_ms=initial_ms,
            multiplier=multiplier,
            max_ms=max_ms,
        )

        return exponential_policy
