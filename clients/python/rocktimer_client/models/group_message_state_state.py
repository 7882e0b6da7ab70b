from typing import Literal

GroupMessageStateState = Literal["acked", "dead", "filtered", "inflight", "pending", "retrying"]

GROUP_MESSAGE_STATE_STATE_VALUES: set[GroupMessageStateState] = {
    "acked",
    "dead",
    "filtered",
    "inflight",
    "pending",
    "retrying",
}


def check_group_message_state_state(value: str) -> GroupMessageStateState:
    if value in GROUP_MESSAGE_STATE_STATE_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {GROUP_MESSAGE_STATE_STATE_VALUES!r}")
