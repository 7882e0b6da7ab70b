from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.dead_letter_detail_body_encoding import (
    DeadLetterDetailBodyEncoding,
    check_dead_letter_detail_body_encoding,
)
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.dead_letter_detail_properties import DeadLetterDetailProperties


T = TypeVar("T", bound="DeadLetterDetail")


@_attrs_define
class DeadLetterDetail:
    """A dead letter with the message itself, for inspection before a redrive.

    Attributes:
        topic (str):
        msg_id (str):
        attempts (int):
        last_failure_ms (int):
        dead_at_ms (int):
        group (str):
        body (str):
        body_encoding (DeadLetterDetailBodyEncoding):
        properties (DeadLetterDetailProperties):
        deliver_at_ms (int):
        tag (str | Unset):
    """

    topic: str
    msg_id: str
    attempts: int
    last_failure_ms: int
    dead_at_ms: int
    group: str
    body: str
    body_encoding: DeadLetterDetailBodyEncoding
    properties: DeadLetterDetailProperties
    deliver_at_ms: int
    tag: str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        topic = self.topic

        msg_id = self.msg_id

        attempts = self.attempts

        last_failure_ms = self.last_failure_ms

        dead_at_ms = self.dead_at_ms

        group = self.group

        body = self.body

        body_encoding: str = self.body_encoding

        properties = self.properties.to_dict()

        deliver_at_ms = self.deliver_at_ms

        tag = self.tag

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "topic": topic,
                "msg_id": msg_id,
                "attempts": attempts,
                "last_failure_ms": last_failure_ms,
                "dead_at_ms": dead_at_ms,
                "group": group,
                "body": body,
                "body_encoding": body_encoding,
                "properties": properties,
                "deliver_at_ms": deliver_at_ms,
            }
        )
        if tag is not UNSET:
            field_dict["tag"] = tag

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.dead_letter_detail_properties import DeadLetterDetailProperties  # noqa: PLC0415

        d = dict(src_dict)
        topic = d.pop("topic")

        msg_id = d.pop("msg_id")

        attempts = d.pop("attempts")

        last_failure_ms = d.pop("last_failure_ms")

        dead_at_ms = d.pop("dead_at_ms")

        group = d.pop("group")

        body = d.pop("body")

        body_encoding = check_dead_letter_detail_body_encoding(d.pop("body_encoding"))

        properties = DeadLetterDetailProperties.from_dict(d.pop("properties"))

        deliver_at_ms = d.pop("deliver_at_ms")

        tag = d.pop("tag", UNSET)

        dead_letter_detail = cls(
            topic=topic,
            msg_id=msg_id,
            attempts=attempts,
            last_failure_ms=last_failure_ms,
            dead_at_ms=dead_at_ms,
            group=group,
            body=body,
            body_encoding=body_encoding,
            properties=properties,
            deliver_at_ms=deliver_at_ms,
            tag=tag,
        )

        dead_letter_detail.additional_properties = d
        return dead_letter_detail

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
