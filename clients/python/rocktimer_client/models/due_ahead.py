from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="DueAhead")


@_attrs_define
class DueAhead:
    """
    Attributes:
        bucket_ms (int):
        counts (list[int]):
        capped (bool):
    """

    bucket_ms: int
    counts: list[int]
    capped: bool
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        bucket_ms = self.bucket_ms

        counts = self.counts

        capped = self.capped

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "bucket_ms": bucket_ms,
                "counts": counts,
                "capped": capped,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        bucket_ms = d.pop("bucket_ms")

        counts = cast(list[int], d.pop("counts"))

        capped = d.pop("capped")

        due_ahead = cls(
            bucket_ms=bucket_ms,
            counts=counts,
            capped=capped,
        )

        due_ahead.additional_properties = d
        return due_ahead

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
