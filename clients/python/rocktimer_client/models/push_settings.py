from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="PushSettings")


@_attrs_define
class PushSettings:
    """A group's push delivery: each message is POSTed to ``url`` as JSON.

    Attributes:
        url (str): http(s) URL on a host of ROCKTIMER_PUSH_ALLOWED_HOSTS
        secret (None | str | Unset): HMAC-SHA256 key of the Rocktimer-Signature header; write-only (read back as null; a
            PUT without one keeps the one stored)
        timeout_ms (int | Unset): A reply later than this fails the attempt Default: 10000.
        max_in_flight (int | Unset): POSTs under way at once Default: 16.
    """

    url: str
    secret: None | str | Unset = UNSET
    timeout_ms: int | Unset = 10000
    max_in_flight: int | Unset = 16

    def to_dict(self) -> dict[str, Any]:
        url = self.url

        secret: None | str | Unset
        if isinstance(self.secret, Unset):
            secret = UNSET
        else:
            secret = self.secret

        timeout_ms = self.timeout_ms

        max_in_flight = self.max_in_flight

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "url": url,
            }
        )
        if secret is not UNSET:
            field_dict["secret"] = secret
        if timeout_ms is not UNSET:
            field_dict["timeout_ms"] = timeout_ms
        if max_in_flight is not UNSET:
            field_dict["max_in_flight"] = max_in_flight

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        url = d.pop("url")

        def _parse_secret(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        secret = _parse_secret(d.pop("secret", UNSET))

        timeout_ms = d.pop("timeout_ms", UNSET)

        max_in_flight = d.pop("max_in_flight", UNSET)

        push_settings = cls(
            url=url,
            secret=secret,
            timeout_ms=timeout_ms,
            max_in_flight=max_in_flight,
        )

        return push_settings
