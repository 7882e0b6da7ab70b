from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.exponential_policy import ExponentialPolicy
    from ..models.fixed_policy import FixedPolicy
    from ..models.levels_policy import LevelsPolicy
    from ..models.push_settings import PushSettings


T = TypeVar("T", bound="GroupSettings")


@_attrs_define
class GroupSettings:
    """A consumer group's settings on one topic.

    Attributes:
        max_attempts (int | Unset):  Default: 16.
        retry (ExponentialPolicy | FixedPolicy | LevelsPolicy | Unset):
        filter_ (str | Unset): Tag expression: "*" or tags joined by "||", e.g. "TagA || TagB" Default: '*'.
        push (None | PushSettings | Unset): POST each message to a URL instead of waiting for receives
    """

    max_attempts: int | Unset = 16
    retry: ExponentialPolicy | FixedPolicy | LevelsPolicy | Unset = UNSET
    filter_: str | Unset = "*"
    push: None | PushSettings | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.exponential_policy import ExponentialPolicy  # noqa: PLC0415
        from ..models.levels_policy import LevelsPolicy  # noqa: PLC0415
        from ..models.push_settings import PushSettings  # noqa: PLC0415

        max_attempts = self.max_attempts

        retry: dict[str, Any] | Unset
        if isinstance(self.retry, Unset):
            retry = UNSET
        elif isinstance(self.retry, LevelsPolicy):
            retry = self.retry.to_dict()
        elif isinstance(self.retry, ExponentialPolicy):
            retry = self.retry.to_dict()
        else:
            retry = self.retry.to_dict()

        filter_ = self.filter_

        push: dict[str, Any] | None | Unset
        if isinstance(self.push, Unset):
            push = UNSET
        elif isinstance(self.push, PushSettings):
            push = self.push.to_dict()
        else:
            push = self.push

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if max_attempts is not UNSET:
            field_dict["max_attempts"] = max_attempts
        if retry is not UNSET:
            field_dict["retry"] = retry
        if filter_ is not UNSET:
            field_dict["filter"] = filter_
        if push is not UNSET:
            field_dict["push"] = push

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.exponential_policy import ExponentialPolicy  # noqa: PLC0415
        from ..models.fixed_policy import FixedPolicy  # noqa: PLC0415
        from ..models.levels_policy import LevelsPolicy  # noqa: PLC0415
        from ..models.push_settings import PushSettings  # noqa: PLC0415

        d = dict(src_dict)
        max_attempts = d.pop("max_attempts", UNSET)

        def _parse_retry(data: object) -> ExponentialPolicy | FixedPolicy | LevelsPolicy | Unset:
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                retry_type_0 = LevelsPolicy.from_dict(data)

                return retry_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                retry_type_1 = ExponentialPolicy.from_dict(data)

                return retry_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            if not isinstance(data, dict):
                raise TypeError()
            retry_type_2 = FixedPolicy.from_dict(data)

            return retry_type_2

        retry = _parse_retry(d.pop("retry", UNSET))

        filter_ = d.pop("filter", UNSET)

        def _parse_push(data: object) -> None | PushSettings | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                push_type_0 = PushSettings.from_dict(data)

                return push_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | PushSettings | Unset, data)

        push = _parse_push(d.pop("push", UNSET))

        group_settings = cls(
            max_attempts=max_attempts,
            retry=retry,
            filter_=filter_,
            push=push,
        )

        return group_settings
