from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.group_message_state_state import GroupMessageStateState, check_group_message_state_state
from ..types import UNSET, Unset

T = TypeVar("T", bound="GroupMessageState")


@_attrs_define
class GroupMessageState:
    """
    Attributes:
        state (GroupMessageStateState):
        attempts (int):
        next_visible_ms (int | Unset):
        last_failure_ms (int | Unset):
    """

    state: GroupMessageStateState
    attempts: int
    next_visible_ms: int | Unset = UNSET
    last_failure_ms: int | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        state: str = self.state

        attempts = self.attempts

        next_visible_ms = self.next_visible_ms

        last_failure_ms = self.last_failure_ms

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "state": state,
                "attempts": attempts,
            }
        )
        if next_visible_ms is not UNSET:
            field_dict["next_visible_ms"] = next_visible_ms
        if last_failure_ms is not UNSET:
            field_dict["last_failure_ms"] = last_failure_ms

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        state = check_group_message_state_state(d.pop("state"))

        attempts = d.pop("attempts")

        next_visible_ms = d.pop("next_visible_ms", UNSET)

        last_failure_ms = d.pop("last_failure_ms", UNSET)

        group_message_state = cls(
            state=state,
            attempts=attempts,
            next_visible_ms=next_visible_ms,
            last_failure_ms=last_failure_ms,
        )

        group_message_state.additional_properties = d
        return group_message_state

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
