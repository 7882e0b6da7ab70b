from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="LevelsPolicy")


@_attrs_define
class LevelsPolicy:
    """RocketMQ's default: retry k waits delay level 2 + k (10 s, 30 s, 1 m … 2 h).

    Attributes:
        policy (Literal['levels'] | Unset):  Default: 'levels'.
    """

    policy: Literal["levels"] | Unset = "levels"

    def to_dict(self) -> dict[str, Any]:
        policy = self.policy

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if policy is not UNSET:
            field_dict["policy"] = policy

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        policy = cast(Literal["levels"] | Unset, d.pop("policy", UNSET))
        if policy != "levels" and not isinstance(policy, Unset):
            raise ValueError(f"policy must match const 'levels', got '{policy}'")

        levels_policy = cls(
            policy=policy,
        )

        return levels_policy
