from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="RescheduleMessage")


@_attrs_define
class RescheduleMessage:
    """The new delivery time: exactly one of deliver_at_ms, delay_ms (from now),
    delay_level. A time already past delivers at once.

        Attributes:
            deliver_at_ms (int | None | Unset):
            delay_ms (int | None | Unset):
            delay_level (int | None | Unset):
    """

    deliver_at_ms: int | None | Unset = UNSET
    delay_ms: int | None | Unset = UNSET
    delay_level: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        deliver_at_ms: int | None | Unset
        if isinstance(self.deliver_at_ms, Unset):
            deliver_at_ms = UNSET
        else:
            deliver_at_ms = self.deliver_at_ms

        delay_ms: int | None | Unset
        if isinstance(self.delay_ms, Unset):
            delay_ms = UNSET
        else:
            delay_ms = self.delay_ms

        delay_level: int | None | Unset
        if isinstance(self.delay_level, Unset):
            delay_level = UNSET
        else:
            delay_level = self.delay_level

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if deliver_at_ms is not UNSET:
            field_dict["deliver_at_ms"] = deliver_at_ms
        if delay_ms is not UNSET:
            field_dict["delay_ms"] = delay_ms
        if delay_level is not UNSET:
            field_dict["delay_level"] = delay_level

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)

        def _parse_deliver_at_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        deliver_at_ms = _parse_deliver_at_ms(d.pop("deliver_at_ms", UNSET))

        def _parse_delay_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        delay_ms = _parse_delay_ms(d.pop("delay_ms", UNSET))

        def _parse_delay_level(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        delay_level = _parse_delay_level(d.pop("delay_level", UNSET))

        reschedule_message = cls(
            deliver_at_ms=deliver_at_ms,
            delay_ms=delay_ms,
            delay_level=delay_level,
        )

        return reschedule_message
