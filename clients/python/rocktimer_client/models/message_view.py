from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.message_view_state import MessageViewState, check_message_view_state
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.message_view_properties import MessageViewProperties


T = TypeVar("T", bound="MessageView")


@_attrs_define
class MessageView:
    """
    Attributes:
        topic (str):
        msg_id (str):
        state (MessageViewState):
        deliver_at_ms (int):
        created_at_ms (int):
        properties (MessageViewProperties):
        delivered_at_ms (int | Unset):
        cancelled_at_ms (int | Unset):
        tag (str | Unset):
    """

    topic: str
    msg_id: str
    state: MessageViewState
    deliver_at_ms: int
    created_at_ms: int
    properties: MessageViewProperties
    delivered_at_ms: int | Unset = UNSET
    cancelled_at_ms: int | Unset = UNSET
    tag: str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        topic = self.topic

        msg_id = self.msg_id

        state: str = self.state

        deliver_at_ms = self.deliver_at_ms

        created_at_ms = self.created_at_ms

        properties = self.properties.to_dict()

        delivered_at_ms = self.delivered_at_ms

        cancelled_at_ms = self.cancelled_at_ms

        tag = self.tag

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "topic": topic,
                "msg_id": msg_id,
                "state": state,
                "deliver_at_ms": deliver_at_ms,
                "created_at_ms": created_at_ms,
                "properties": properties,
            }
        )
        if delivered_at_ms is not UNSET:
            field_dict["delivered_at_ms"] = delivered_at_ms
        if cancelled_at_ms is not UNSET:
            field_dict["cancelled_at_ms"] = cancelled_at_ms
        if tag is not UNSET:
            field_dict["tag"] = tag

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.message_view_properties import MessageViewProperties  # noqa: PLC0415

        d = dict(src_dict)
        topic = d.pop("topic")

        msg_id = d.pop("msg_id")

        state = check_message_view_state(d.pop("state"))

        deliver_at_ms = d.pop("deliver_at_ms")

        created_at_ms = d.pop("created_at_ms")

        properties = MessageViewProperties.from_dict(d.pop("properties"))

        delivered_at_ms = d.pop("delivered_at_ms", UNSET)

        cancelled_at_ms = d.pop("cancelled_at_ms", UNSET)

        tag = d.pop("tag", UNSET)

        message_view = cls(
            topic=topic,
            msg_id=msg_id,
            state=state,
            deliver_at_ms=deliver_at_ms,
            created_at_ms=created_at_ms,
            properties=properties,
            delivered_at_ms=delivered_at_ms,
            cancelled_at_ms=cancelled_at_ms,
            tag=tag,
        )

        message_view.additional_properties = d
        return message_view

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
