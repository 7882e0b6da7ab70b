from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="Health")


@_attrs_define
class Health:
    """
    Attributes:
        status (str):
        pending_timers (int | Unset):
        writer_queue (int | Unset):
        due_backlog_timers (int | Unset):
        due_backlog_oldest_ms (int | Unset):
    """

    status: str
    pending_timers: int | Unset = UNSET
    writer_queue: int | Unset = UNSET
    due_backlog_timers: int | Unset = UNSET
    due_backlog_oldest_ms: int | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        status = self.status

        pending_timers = self.pending_timers

        writer_queue = self.writer_queue

        due_backlog_timers = self.due_backlog_timers

        due_backlog_oldest_ms = self.due_backlog_oldest_ms

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "status": status,
            }
        )
        if pending_timers is not UNSET:
            field_dict["pending_timers"] = pending_timers
        if writer_queue is not UNSET:
            field_dict["writer_queue"] = writer_queue
        if due_backlog_timers is not UNSET:
            field_dict["due_backlog_timers"] = due_backlog_timers
        if due_backlog_oldest_ms is not UNSET:
            field_dict["due_backlog_oldest_ms"] = due_backlog_oldest_ms

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        status = d.pop("status")

        pending_timers = d.pop("pending_timers", UNSET)

        writer_queue = d.pop("writer_queue", UNSET)

        due_backlog_timers = d.pop("due_backlog_timers", UNSET)

        due_backlog_oldest_ms = d.pop("due_backlog_oldest_ms", UNSET)

        health = cls(
            status=status,
            pending_timers=pending_timers,
            writer_queue=writer_queue,
            due_backlog_timers=due_backlog_timers,
            due_backlog_oldest_ms=due_backlog_oldest_ms,
        )

        health.additional_properties = d
        return health

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
