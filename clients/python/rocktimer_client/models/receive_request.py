from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="ReceiveRequest")


@_attrs_define
class ReceiveRequest:
    """
    Attributes:
        max_messages (int | Unset):  Default: 16.
        wait_ms (int | Unset):  Default: 0.
        invisible_ms (int | Unset):  Default: 30000.
    """

    max_messages: int | Unset = 16
    wait_ms: int | Unset = 0
    invisible_ms: int | Unset = 30000

    def to_dict(self) -> dict[str, Any]:
        max_messages = self.max_messages

        wait_ms = self.wait_ms

        invisible_ms = self.invisible_ms

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if max_messages is not UNSET:
            field_dict["max_messages"] = max_messages
        if wait_ms is not UNSET:
            field_dict["wait_ms"] = wait_ms
        if invisible_ms is not UNSET:
            field_dict["invisible_ms"] = invisible_ms

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        max_messages = d.pop("max_messages", UNSET)

        wait_ms = d.pop("wait_ms", UNSET)

        invisible_ms = d.pop("invisible_ms", UNSET)

        receive_request = cls(
            max_messages=max_messages,
            wait_ms=wait_ms,
            invisible_ms=invisible_ms,
        )

        return receive_request
