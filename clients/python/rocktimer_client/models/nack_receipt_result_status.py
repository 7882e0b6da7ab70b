from typing import Literal

NackReceiptResultStatus = Literal["expired", "nacked", "unknown"]

NACK_RECEIPT_RESULT_STATUS_VALUES: set[NackReceiptResultStatus] = {
    "expired",
    "nacked",
    "unknown",
}


def check_nack_receipt_result_status(value: str) -> NackReceiptResultStatus:
    if value in NACK_RECEIPT_RESULT_STATUS_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {NACK_RECEIPT_RESULT_STATUS_VALUES!r}")
