from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="RedriveResult")


@_attrs_define
class RedriveResult:
    """
    Attributes:
        topic (str):
        group (str):
        msg_id (str):
        state (Literal['pending']):
    """

    topic: str
    group: str
    msg_id: str
    state: Literal["pending"]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        topic = self.topic

        group = self.group

        msg_id = self.msg_id

        state = self.state

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "topic": topic,
                "group": group,
                "msg_id": msg_id,
                "state": state,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        topic = d.pop("topic")

        group = d.pop("group")

        msg_id = d.pop("msg_id")

        state = cast(Literal["pending"], d.pop("state"))
        if state != "pending":
            raise ValueError(f"state must match const 'pending', got '{state}'")

        redrive_result = cls(
            topic=topic,
            group=group,
            msg_id=msg_id,
            state=state,
        )

        redrive_result.additional_properties = d
        return redrive_result

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
