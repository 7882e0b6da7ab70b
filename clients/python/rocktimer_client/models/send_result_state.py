from typing import Literal

SendResultState = Literal["cancelled", "delivered", "scheduled"]

SEND_RESULT_STATE_VALUES: set[SendResultState] = {
    "cancelled",
    "delivered",
    "scheduled",
}


def check_send_result_state(value: str) -> SendResultState:
    if value in SEND_RESULT_STATE_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {SEND_RESULT_STATE_VALUES!r}")
