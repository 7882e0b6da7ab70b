from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

T = TypeVar("T", bound="AckRequest")


@_attrs_define
class AckRequest:
    """
    Attributes:
        receipts (list[str]):
    """

    receipts: list[str]

    def to_dict(self) -> dict[str, Any]:
        receipts = self.receipts

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "receipts": receipts,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        receipts = cast(list[str], d.pop("receipts"))

        ack_request = cls(
            receipts=receipts,
        )

        return ack_request
