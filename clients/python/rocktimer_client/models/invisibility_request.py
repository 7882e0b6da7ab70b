from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

T = TypeVar("T", bound="InvisibilityRequest")


@_attrs_define
class InvisibilityRequest:
    """
    Attributes:
        receipt (str):
        invisible_ms (int):
    """

    receipt: str
    invisible_ms: int

    def to_dict(self) -> dict[str, Any]:
        receipt = self.receipt

        invisible_ms = self.invisible_ms

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "receipt": receipt,
                "invisible_ms": invisible_ms,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        receipt = d.pop("receipt")

        invisible_ms = d.pop("invisible_ms")

        invisibility_request = cls(
            receipt=receipt,
            invisible_ms=invisible_ms,
        )

        return invisibility_request
