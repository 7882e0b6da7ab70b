from typing import Literal

MessageViewState = Literal["cancelled", "delivered", "scheduled"]

MESSAGE_VIEW_STATE_VALUES: set[MessageViewState] = {
    "cancelled",
    "delivered",
    "scheduled",
}


def check_message_view_state(value: str) -> MessageViewState:
    if value in MESSAGE_VIEW_STATE_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {MESSAGE_VIEW_STATE_VALUES!r}")
