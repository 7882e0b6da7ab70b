from typing import Literal

ReceiptResultStatus = Literal["acked", "expired", "unknown"]

RECEIPT_RESULT_STATUS_VALUES: set[ReceiptResultStatus] = {
    "acked",
    "expired",
    "unknown",
}


def check_receipt_result_status(value: str) -> ReceiptResultStatus:
    if value in RECEIPT_RESULT_STATUS_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {RECEIPT_RESULT_STATUS_VALUES!r}")
