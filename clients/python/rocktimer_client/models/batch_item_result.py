from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.batch_item_result_state import BatchItemResultState, check_batch_item_result_state
from ..types import UNSET, Unset

T = TypeVar("T", bound="BatchItemResult")


@_attrs_define
class BatchItemResult:
    """
    Attributes:
        index (int):
        status (int):
        msg_id (str | Unset):
        state (BatchItemResultState | Unset):
        deliver_at_ms (int | Unset):
        error (str | Unset):
    """

    index: int
    status: int
    msg_id: str | Unset = UNSET
    state: BatchItemResultState | Unset = UNSET
    deliver_at_ms: int | Unset = UNSET
    error: str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        index = self.index

        status = self.status

        msg_id = self.msg_id

        state: str | Unset = UNSET
        if not isinstance(self.state, Unset):
            state = self.state

        deliver_at_ms = self.deliver_at_ms

        error = self.error

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "index": index,
                "status": status,
            }
        )
        if msg_id is not UNSET:
            field_dict["msg_id"] = msg_id
        if state is not UNSET:
            field_dict["state"] = state
        if deliver_at_ms is not UNSET:
            field_dict["deliver_at_ms"] = deliver_at_ms
        if error is not UNSET:
            field_dict["error"] = error

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        index = d.pop("index")

        status = d.pop("status")

        msg_id = d.pop("msg_id", UNSET)

        _state = d.pop("state", UNSET)
        state: BatchItemResultState | Unset
        if isinstance(_state, Unset):
            state = UNSET
        else:
            state = check_batch_item_result_state(_state)

        deliver_at_ms = d.pop("deliver_at_ms", UNSET)

        error = d.pop("error", UNSET)

        batch_item_result = cls(
            index=index,
            status=status,
            msg_id=msg_id,
            state=state,
            deliver_at_ms=deliver_at_ms,
            error=error,
        )

        batch_item_result.additional_properties = d
        return batch_item_result

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
