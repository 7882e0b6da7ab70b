from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.put_schedule_body_encoding import PutScheduleBodyEncoding, check_put_schedule_body_encoding
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.put_schedule_properties_type_0 import PutSchedulePropertiesType0


T = TypeVar("T", bound="PutSchedule")


@_attrs_define
class PutSchedule:
    """A recurring schedule: exactly one of cron (five fields, in ``timezone``) and
    every_ms; each fire is one message with this body, properties and tag.

        Attributes:
            body (str):
            cron (None | str | Unset):
            every_ms (int | None | Unset):
            timezone (str | Unset):  Default: 'UTC'.
            body_encoding (PutScheduleBodyEncoding | Unset):  Default: 'utf8'.
            properties (None | PutSchedulePropertiesType0 | Unset):
            tag (None | str | Unset):
            start_at_ms (int | None | Unset):
            end_at_ms (int | None | Unset):
    """

    body: str
    cron: None | str | Unset = UNSET
    every_ms: int | None | Unset = UNSET
    timezone: str | Unset = "UTC"
    body_encoding: PutScheduleBodyEncoding | Unset = "utf8"
    properties: None | PutSchedulePropertiesType0 | Unset = UNSET
    tag: None | str | Unset = UNSET
    start_at_ms: int | None | Unset = UNSET
    end_at_ms: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.put_schedule_properties_type_0 import PutSchedulePropertiesType0  # noqa: PLC0415

        body = self.body

        cron: None | str | Unset
        if isinstance(self.cron, Unset):
            cron = UNSET
        else:
            cron = self.cron

        every_ms: int | None | Unset
        if isinstance(self.every_ms, Unset):
            every_ms = UNSET
        else:
            every_ms = self.every_ms

        timezone = self.timezone

        body_encoding: str | Unset = UNSET
        if not isinstance(self.body_encoding, Unset):
            body_encoding = self.body_encoding

        properties: dict[str, Any] | None | Unset
        if isinstance(self.properties, Unset):
            properties = UNSET
        elif isinstance(self.properties, PutSchedulePropertiesType0):
            properties = self.properties.to_dict()
        else:
            properties = self.properties

        tag: None | str | Unset
        if isinstance(self.tag, Unset):
            tag = UNSET
        else:
            tag = self.tag

        start_at_ms: int | None | Unset
        if isinstance(self.start_at_ms, Unset):
            start_at_ms = UNSET
        else:
            start_at_ms = self.start_at_ms

        end_at_ms: int | None | Unset
        if isinstance(self.end_at_ms, Unset):
            end_at_ms = UNSET
        else:
            end_at_ms = self.end_at_ms

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "body": body,
            }
        )
        if cron is not UNSET:
            field_dict["cron"] = cron
        if every_ms is not UNSET:
            field_dict["every_ms"] = every_ms
        if timezone is not UNSET:
            field_dict["timezone"] = timezone
        if body_encoding is not UNSET:
            field_dict["body_encoding"] = body_encoding
        if properties is not UNSET:
            field_dict["properties"] = properties
        if tag is not UNSET:
            field_dict["tag"] = tag
        if start_at_ms is not UNSET:
            field_dict["start_at_ms"] = start_at_ms
        if end_at_ms is not UNSET:
            field_dict["end_at_ms"] = end_at_ms

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.put_schedule_properties_type_0 import PutSchedulePropertiesType0  # noqa: PLC0415

        d = dict(src_dict)
        body = d.pop("body")

        def _parse_cron(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        cron = _parse_cron(d.pop("cron", UNSET))

        def _parse_every_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        every_ms = _parse_every_ms(d.pop("every_ms", UNSET))

        timezone = d.pop("timezone", UNSET)

        _body_encoding = d.pop("body_encoding", UNSET)
        body_encoding: PutScheduleBodyEncoding | Unset
        if isinstance(_body_encoding, Unset):
            body_encoding = UNSET
        else:
            body_encoding = check_put_schedule_body_encoding(_body_encoding)

        def _parse_properties(data: object) -> None | PutSchedulePropertiesType0 | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                properties_type_0 = PutSchedulePropertiesType0.from_dict(data)

                return properties_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | PutSchedulePropertiesType0 | Unset, data)

        properties = _parse_properties(d.pop("properties", UNSET))

        def _parse_tag(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        tag = _parse_tag(d.pop("tag", UNSET))

        def _parse_start_at_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        start_at_ms = _parse_start_at_ms(d.pop("start_at_ms", UNSET))

        def _parse_end_at_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        end_at_ms = _parse_end_at_ms(d.pop("end_at_ms", UNSET))

        put_schedule = cls(
            body=body,
            cron=cron,
            every_ms=every_ms,
            timezone=timezone,
            body_encoding=body_encoding,
            properties=properties,
            tag=tag,
            start_at_ms=start_at_ms,
            end_at_ms=end_at_ms,
        )

        return put_schedule
