from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.exponential_policy import ExponentialPolicy
    from ..models.fixed_policy import FixedPolicy
    from ..models.levels_policy import LevelsPolicy


T = TypeVar("T", bound="GroupSettings")


@_attrs_define
class GroupSettings:
    """A consumer group's settings on one topic.

    Attributes:
        max_attempts (int | Unset):  Default: 16.
        retry (ExponentialPolicy | FixedPolicy | LevelsPolicy | Unset):
        filter_ (str | Unset): Tag expression: "*" or tags joined by "||", e.g. "TagA || TagB" Default: '*'.
    """

    max_attempts: int | Unset = 16
    retry: ExponentialPolicy | FixedPolicy | LevelsPolicy | Unset = UNSET
    filter_: str | Unset = "*"

    def to_dict(self) -> dict[str, Any]:
        from ..models.exponential_policy import ExponentialPolicy  # noqa: PLC0415
        from ..models.levels_policy import LevelsPolicy  # noqa: PLC0415

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

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if max_attempts is not UNSET:
            field_dict["max_attempts"] = max_attempts
        if retry is not UNSET:
            field_dict["retry"] = retry
        if filter_ is not UNSET:
            field_dict["filter"] = filter_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.exponential_policy import ExponentialPolicy  # noqa: PLC0415
        from ..models.fixed_policy import FixedPolicy  # noqa: PLC0415
        from ..models.levels_policy import LevelsPolicy  # noqa: PLC0415

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

        group_settings = cls(
            max_attempts=max_attempts,
            retry=retry,
            filter_=filter_,
        )

        return group_settings
