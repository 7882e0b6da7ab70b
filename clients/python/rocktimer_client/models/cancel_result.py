from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="CancelResult")


@_attrs_define
class CancelResult:
    """
    Attributes:
        topic (str):
        msg_id (str):
        state (Literal['cancelled']):
        cancelled_at_ms (int):
    """

    topic: str
    msg_id: str
    state: Literal["cancelled"]
    cancelled_at_ms: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        topic = self.topic

        msg_id = self.msg_id

        state = self.state

        cancelled_at_ms = self.cancelled_at_ms

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "topic": topic,
                "msg_id": msg_id,
                "state": state,
                "cancelled_at_ms": cancelled_at_ms,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        topic = d.pop("topic")

        msg_id = d.pop("msg_id")

        state = cast(Literal["cancelled"], d.pop("state"))
        if state != "cancelled":
            raise ValueError(f"state must match const 'cancelled', got '{state}'")

        cancelled_at_ms = d.pop("cancelled_at_ms")

        cancel_result = cls(
            topic=topic,
            msg_id=msg_id,
            state=state,
            cancelled_at_ms=cancelled_at_ms,
        )

        cancel_result.additional_properties = d
        return cancel_result

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
