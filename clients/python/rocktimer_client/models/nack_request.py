from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="NackRequest")


@_attrs_define
class NackRequest:
    """
    Attributes:
        receipts (list[str]):
        delay_ms (int | None | Unset):
    """

    receipts: list[str]
    delay_ms: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        receipts = self.receipts

        delay_ms: int | None | Unset
        if isinstance(self.delay_ms, Unset):
            delay_ms = UNSET
        else:
            delay_ms = self.delay_ms

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "receipts": receipts,
            }
        )
        if delay_ms is not UNSET:
            field_dict["delay_ms"] = delay_ms

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        receipts = cast(list[str], d.pop("receipts"))

        def _parse_delay_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        delay_ms = _parse_delay_ms(d.pop("delay_ms", UNSET))

        nack_request = cls(
            receipts=receipts,
            delay_ms=delay_ms,
        )

        return nack_request
