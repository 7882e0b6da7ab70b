from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="TopicItem")


@_attrs_define
class TopicItem:
    """A topic and its counts (kept as messages change, never counted by a scan).

    Attributes:
        topic (str):
        scheduled (int): Messages scheduled, not yet due
        delivered (int): Messages delivered into the topic since it began
        cancelled (int): Messages cancelled since the topic began
    """

    topic: str
    scheduled: int
    delivered: int
    cancelled: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        topic = self.topic

        scheduled = self.scheduled

        delivered = self.delivered

        cancelled = self.cancelled

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "topic": topic,
                "scheduled": scheduled,
                "delivered": delivered,
                "cancelled": cancelled,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        topic = d.pop("topic")

        scheduled = d.pop("scheduled")

        delivered = d.pop("delivered")

        cancelled = d.pop("cancelled")

        topic_item = cls(
            topic=topic,
            scheduled=scheduled,
            delivered=delivered,
            cancelled=cancelled,
        )

        topic_item.additional_properties = d
        return topic_item

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
