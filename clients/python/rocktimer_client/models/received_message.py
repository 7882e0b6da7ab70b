from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.received_message_body_encoding import ReceivedMessageBodyEncoding, check_received_message_body_encoding
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.received_message_properties import ReceivedMessageProperties


T = TypeVar("T", bound="ReceivedMessage")


@_attrs_define
class ReceivedMessage:
    """
    Attributes:
        topic (str):
        msg_id (str):
        body (str):
        body_encoding (ReceivedMessageBodyEncoding):
        properties (ReceivedMessageProperties):
        deliver_at_ms (int):
        delivered_at_ms (int):
        attempt (int):
        receipt (str):
        source_topic (str | Unset):
        tag (str | Unset):
    """

    topic: str
    msg_id: str
    body: str
    body_encoding: ReceivedMessageBodyEncoding
    properties: ReceivedMessageProperties
    deliver_at_ms: int
    delivered_at_ms: int
    attempt: int
    receipt: str
    source_topic: str | Unset = UNSET
    tag: str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        topic = self.topic

        msg_id = self.msg_id

        body = self.body

        body_encoding: str = self.body_encoding

        properties = self.properties.to_dict()

        deliver_at_ms = self.deliver_at_ms

        delivered_at_ms = self.delivered_at_ms

        attempt = self.attempt

        receipt = self.receipt

        source_topic = self.source_topic

        tag = self.tag

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "topic": topic,
                "msg_id": msg_id,
                "body": body,
                "body_encoding": body_encoding,
                "properties": properties,
                "deliver_at_ms": deliver_at_ms,
                "delivered_at_ms": delivered_at_ms,
                "attempt": attempt,
                "receipt": receipt,
            }
        )
        if source_topic is not UNSET:
            field_dict["source_topic"] = source_topic
        if tag is not UNSET:
            field_dict["tag"] = tag

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.received_message_properties import ReceivedMessageProperties  # noqa: PLC0415

        d = dict(src_dict)
        topic = d.pop("topic")

        msg_id = d.pop("msg_id")

        body = d.pop("body")

        body_encoding = check_received_message_body_encoding(d.pop("body_encoding"))

        properties = ReceivedMessageProperties.from_dict(d.pop("properties"))

        deliver_at_ms = d.pop("deliver_at_ms")

        delivered_at_ms = d.pop("delivered_at_ms")

        attempt = d.pop("attempt")

        receipt = d.pop("receipt")

        source_topic = d.pop("source_topic", UNSET)

        tag = d.pop("tag", UNSET)

        received_message = cls(
            topic=topic,
            msg_id=msg_id,
            body=body,
            body_encoding=body_encoding,
            properties=properties,
            deliver_at_ms=deliver_at_ms,
            delivered_at_ms=delivered_at_ms,
            attempt=attempt,
            receipt=receipt,
            source_topic=source_topic,
            tag=tag,
        )

        received_message.additional_properties = d
        return received_message

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
