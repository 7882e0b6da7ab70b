from typing import Literal

BatchItemResultState = Literal["cancelled", "delivered", "scheduled"]

BATCH_ITEM_RESULT_STATE_VALUES: set[BatchItemResultState] = {
    "cancelled",
    "delivered",
    "scheduled",
}


def check_batch_item_result_state(value: str) -> BatchItemResultState:
    if value in BATCH_ITEM_RESULT_STATE_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {BATCH_ITEM_RESULT_STATE_VALUES!r}")
