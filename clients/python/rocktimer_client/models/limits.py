from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="Limits")


@_attrs_define
class Limits:
    """What the service accepts, for clients that size their requests (the bulk loader):
    its settings, not the client's.

        Attributes:
            max_request_bytes (int):
            max_batch (int):
            max_body_bytes (int):
            max_properties (int):
            max_delay_ms (int):
            partitions (int):
    """

    max_request_bytes: int
    max_batch: int
    max_body_bytes: int
    max_properties: int
    max_delay_ms: int
    partitions: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        max_request_bytes = self.max_request_bytes

        max_batch = self.max_batch

        max_body_bytes = self.max_body_bytes

        max_properties = self.max_properties

        max_delay_ms = self.max_delay_ms

        partitions = self.partitions

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "max_request_bytes": max_request_bytes,
                "max_batch": max_batch,
                "max_body_bytes": max_body_bytes,
                "max_properties": max_properties,
                "max_delay_ms": max_delay_ms,
                "partitions": partitions,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        max_request_bytes = d.pop("max_request_bytes")

        max_batch = d.pop("max_batch")

        max_body_bytes = d.pop("max_body_bytes")

        max_properties = d.pop("max_properties")

        max_delay_ms = d.pop("max_delay_ms")

        partitions = d.pop("partitions")

        limits = cls(
            max_request_bytes=max_request_bytes,
            max_batch=max_batch,
            max_body_bytes=max_body_bytes,
            max_properties=max_properties,
            max_delay_ms=max_delay_ms,
            partitions=partitions,
        )

        limits.additional_properties = d
        return limits

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
