from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.send_message_body_encoding import SendMessageBodyEncoding, check_send_message_body_encoding
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.send_message_properties_type_0 import SendMessagePropertiesType0


T = TypeVar("T", bound="SendMessage")


@_attrs_define
class SendMessage:
    """One message to schedule. At most one of deliver_at_ms, delay_ms, delay_level;
    none means now.

        Attributes:
            body (str):
            msg_id (None | str | Unset):
            body_encoding (SendMessageBodyEncoding | Unset):  Default: 'utf8'.
            properties (None | SendMessagePropertiesType0 | Unset):
            tag (None | str | Unset):
            deliver_at_ms (int | None | Unset):
            delay_ms (int | None | Unset):
            delay_level (int | None | Unset):
    """

    body: str
    msg_id: None | str | Unset = UNSET
    body_encoding: SendMessageBodyEncoding | Unset = "utf8"
    properties: None | SendMessagePropertiesType0 | Unset = UNSET
    tag: None | str | Unset = UNSET
    deliver_at_ms: int | None | Unset = UNSET
    delay_ms: int | None | Unset = UNSET
    delay_level: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.send_message_properties_type_0 import SendMessagePropertiesType0  # noqa: PLC0415

        body = self.body

        msg_id: None | str | Unset
        if isinstance(self.msg_id, Unset):
            msg_id = UNSET
        else:
            msg_id = self.msg_id

        body_encoding: str | Unset = UNSET
        if not isinstance(self.body_encoding, Unset):
            body_encoding = self.body_encoding

        properties: dict[str, Any] | None | Unset
        if isinstance(self.properties, Unset):
            properties = UNSET
        elif isinstance(self.properties, SendMessagePropertiesType0):
            properties = self.properties.to_dict()
        else:
            properties = self.properties

        tag: None | str | Unset
        if isinstance(self.tag, Unset):
            tag = UNSET
        else:
            tag = self.tag

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

        field_dict.update(
            {
                "body": body,
            }
        )
        if msg_id is not UNSET:
            field_dict["msg_id"] = msg_id
        if body_encoding is not UNSET:
            field_dict["body_encoding"] = body_encoding
        if properties is not UNSET:
            field_dict["properties"] = properties
        if tag is not UNSET:
            field_dict["tag"] = tag
        if deliver_at_ms is not UNSET:
            field_dict["deliver_at_ms"] = deliver_at_ms
        if delay_ms is not UNSET:
            field_dict["delay_ms"] = delay_ms
        if delay_level is not UNSET:
            field_dict["delay_level"] = delay_level

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.send_message_properties_type_0 import SendMessagePropertiesType0  # noqa: PLC0415

        d = dict(src_dict)
        body = d.pop("body")

        def _parse_msg_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        msg_id = _parse_msg_id(d.pop("msg_id", UNSET))

        _body_encoding = d.pop("body_encoding", UNSET)
        body_encoding: SendMessageBodyEncoding | Unset
        if isinstance(_body_encoding, Unset):
            body_encoding = UNSET
        else:
            body_encoding = check_send_message_body_encoding(_body_encoding)

        def _parse_properties(data: object) -> None | SendMessagePropertiesType0 | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                properties_type_0 = SendMessagePropertiesType0.from_dict(data)

                return properties_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | SendMessagePropertiesType0 | Unset, data)

        properties = _parse_properties(d.pop("properties", UNSET))

        def _parse_tag(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        tag = _parse_tag(d.pop("tag", UNSET))

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

        send_message = cls(
            body=body,
            msg_id=msg_id,
            body_encoding=body_encoding,
            properties=properties,
            tag=tag,
            deliver_at_ms=deliver_at_ms,
            delay_ms=delay_ms,
            delay_level=delay_level,
        )

        return send_message
