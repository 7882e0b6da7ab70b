from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.push_settings import PushSettings


T = TypeVar("T", bound="GroupItem")


@_attrs_define
class GroupItem:
    """A consumer group of a topic and where it stands.

    Attributes:
        group (str):
        backlog (int): Messages the group has not received yet
        inflight (int): Received, not yet acked or failed
        retrying (int): Failed, waiting for the retry delay
        dead (int): Dead letters from this topic
        filter_ (str): Tag filter expression ('*': every message)
        push (PushSettings | Unset): A group's push delivery: each message is POSTed to ``url`` as JSON.
    """

    group: str
    backlog: int
    inflight: int
    retrying: int
    dead: int
    filter_: str
    push: PushSettings | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        group = self.group

        backlog = self.backlog

        inflight = self.inflight

        retrying = self.retrying

        dead = self.dead

        filter_ = self.filter_

        push: dict[str, Any] | Unset = UNSET
        if not isinstance(self.push, Unset):
            push = self.push.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "group": group,
                "backlog": backlog,
                "inflight": inflight,
                "retrying": retrying,
                "dead": dead,
                "filter": filter_,
            }
        )
        if push is not UNSET:
            field_dict["push"] = push

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.push_settings import PushSettings  # noqa: PLC0415

        d = dict(src_dict)
        group = d.pop("group")

        backlog = d.pop("backlog")

        inflight = d.pop("inflight")

        retrying = d.pop("retrying")

        dead = d.pop("dead")

        filter_ = d.pop("filter")

        _push = d.pop("push", UNSET)
        push: PushSettings | Unset
        if isinstance(_push, Unset):
            push = UNSET
        else:
            push = PushSettings.from_dict(_push)

        group_item = cls(
            group=group,
            backlog=backlog,
            inflight=inflight,
            retrying=retrying,
            dead=dead,
            filter_=filter_,
            push=push,
        )

        group_item.additional_properties = d
        return group_item

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
