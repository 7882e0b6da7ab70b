from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.schedule_view_body_encoding import ScheduleViewBodyEncoding, check_schedule_view_body_encoding
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.schedule_view_properties import ScheduleViewProperties


T = TypeVar("T", bound="ScheduleView")


@_attrs_define
class ScheduleView:
    """
    Attributes:
        topic (str):
        schedule_id (str):
        cron (None | str):
        every_ms (int | None):
        timezone (str):
        body (str):
        body_encoding (ScheduleViewBodyEncoding):
        properties (ScheduleViewProperties):
        tag (None | str):
        start_at_ms (int | None):
        end_at_ms (int | None):
        created_at_ms (int):
        next_fire_at_ms (int | None):
        last_fire_at_ms (int | None | Unset):
    """

    topic: str
    schedule_id: str
    cron: None | str
    every_ms: int | None
    timezone: str
    body: str
    body_encoding: ScheduleViewBodyEncoding
    properties: ScheduleViewProperties
    tag: None | str
    start_at_ms: int | None
    end_at_ms: int | None
    created_at_ms: int
    next_fire_at_ms: int | None
    last_fire_at_ms: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        topic = self.topic

        schedule_id = self.schedule_id

        cron: None | str
        cron = self.cron

        every_ms: int | None
        every_ms = self.every_ms

        timezone = self.timezone

        body = self.body

        body_encoding: str = self.body_encoding

        properties = self.properties.to_dict()

        tag: None | str
        tag = self.tag

        start_at_ms: int | None
        start_at_ms = self.start_at_ms

        end_at_ms: int | None
        end_at_ms = self.end_at_ms

        created_at_ms = self.created_at_ms

        next_fire_at_ms: int | None
        next_fire_at_ms = self.next_fire_at_ms

        last_fire_at_ms: int | None | Unset
        if isinstance(self.last_fire_at_ms, Unset):
            last_fire_at_ms = UNSET
        else:
            last_fire_at_ms = self.last_fire_at_ms

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "topic": topic,
                "schedule_id": schedule_id,
                "cron": cron,
                "every_ms": every_ms,
                "timezone": timezone,
                "body": body,
                "body_encoding": body_encoding,
                "properties": properties,
                "tag": tag,
                "start_at_ms": start_at_ms,
                "end_at_ms": end_at_ms,
                "created_at_ms": created_at_ms,
                "next_fire_at_ms": next_fire_at_ms,
            }
        )
        if last_fire_at_ms is not UNSET:
            field_dict["last_fire_at_ms"] = last_fire_at_ms

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.schedule_view_properties import ScheduleViewProperties  # noqa: PLC0415

        d = dict(src_dict)
        topic = d.pop("topic")

        schedule_id = d.pop("schedule_id")

        def _parse_cron(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        cron = _parse_cron(d.pop("cron"))

        def _parse_every_ms(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        every_ms = _parse_every_ms(d.pop("every_ms"))

        timezone = d.pop("timezone")

        body = d.pop("body")

        body_encoding = check_schedule_view_body_encoding(d.pop("body_encoding"))

        properties = ScheduleViewProperties.from_dict(d.pop("properties"))

        def _parse_tag(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        tag = _parse_tag(d.pop("tag"))

        def _parse_start_at_ms(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        start_at_ms = _parse_start_at_ms(d.pop("start_at_ms"))

        def _parse_end_at_ms(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        end_at_ms = _parse_end_at_ms(d.pop("end_at_ms"))

        created_at_ms = d.pop("created_at_ms")

        def _parse_next_fire_at_ms(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        next_fire_at_ms = _parse_next_fire_at_ms(d.pop("next_fire_at_ms"))

        def _parse_last_fire_at_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        last_fire_at_ms = _parse_last_fire_at_ms(d.pop("last_fire_at_ms", UNSET))

        schedule_view = cls(
            topic=topic,
            schedule_id=schedule_id,
            cron=cron,
            every_ms=every_ms,
            timezone=timezone,
            body=body,
            body_encoding=body_encoding,
            properties=properties,
            tag=tag,
            start_at_ms=start_at_ms,
            end_at_ms=end_at_ms,
            created_at_ms=created_at_ms,
            next_fire_at_ms=next_fire_at_ms,
            last_fire_at_ms=last_fire_at_ms,
        )

        schedule_view.additional_properties = d
        return schedule_view

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
