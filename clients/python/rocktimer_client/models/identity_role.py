from typing import Literal

IdentityRole = Literal["admin", "consumer", "producer"]

IDENTITY_ROLE_VALUES: set[IdentityRole] = {
    "admin",
    "consumer",
    "producer",
}


def check_identity_role(value: str) -> IdentityRole:
    if value in IDENTITY_ROLE_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {IDENTITY_ROLE_VALUES!r}")
