from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="LatenessSummary")


@_attrs_define
class LatenessSummary:
    """
    Attributes:
        count (int):
        p50_ms (float | Unset):
        p99_ms (float | Unset):
    """

    count: int
    p50_ms: float | Unset = UNSET
    p99_ms: float | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        count = self.count

        p50_ms = self.p50_ms

        p99_ms = self.p99_ms

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "count": count,
            }
        )
        if p50_ms is not UNSET:
            field_dict["p50_ms"] = p50_ms
        if p99_ms is not UNSET:
            field_dict["p99_ms"] = p99_ms

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        count = d.pop("count")

        p50_ms = d.pop("p50_ms", UNSET)

        p99_ms = d.pop("p99_ms", UNSET)

        lateness_summary = cls(
            count=count,
            p50_ms=p50_ms,
            p99_ms=p99_ms,
        )

        lateness_summary.additional_properties = d
        return lateness_summary

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
