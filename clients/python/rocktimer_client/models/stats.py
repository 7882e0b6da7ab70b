from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.due_ahead import DueAhead
    from ..models.lateness_summary import LatenessSummary


T = TypeVar("T", bound="Stats")


@_attrs_define
class Stats:
    """The console's overview, in one cheap call (bounded work, never a count of the store).

    Attributes:
        now_ms (int):
        pending_timers (int):
        delivered_total (int):
        writer_queue (int):
        long_polls (int):
        lateness (LatenessSummary):
        due_ahead (DueAhead):
    """

    now_ms: int
    pending_timers: int
    delivered_total: int
    writer_queue: int
    long_polls: int
    lateness: LatenessSummary
    due_ahead: DueAhead
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        now_ms = self.now_ms

        pending_timers = self.pending_timers

        delivered_total = self.delivered_total

        writer_queue = self.writer_queue

        long_polls = self.long_polls

        lateness = self.lateness.to_dict()

        due_ahead = self.due_ahead.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "now_ms": now_ms,
                "pending_timers": pending_timers,
                "delivered_total": delivered_total,
                "writer_queue": writer_queue,
                "long_polls": long_polls,
                "lateness": lateness,
                "due_ahead": due_ahead,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.due_ahead import DueAhead  # noqa: PLC0415
        from ..models.lateness_summary import LatenessSummary  # noqa: PLC0415

        d = dict(src_dict)
        now_ms = d.pop("now_ms")

        pending_timers = d.pop("pending_timers")

        delivered_total = d.pop("delivered_total")

        writer_queue = d.pop("writer_queue")

        long_polls = d.pop("long_polls")

        lateness = LatenessSummary.from_dict(d.pop("lateness"))

        due_ahead = DueAhead.from_dict(d.pop("due_ahead"))

        stats = cls(
            now_ms=now_ms,
            pending_timers=pending_timers,
            delivered_total=delivered_total,
            writer_queue=writer_queue,
            long_polls=long_polls,
            lateness=lateness,
            due_ahead=due_ahead,
        )

        stats.additional_properties = d
        return stats

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
