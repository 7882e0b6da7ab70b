from typing import Literal

DeadLetterDetailBodyEncoding = Literal["base64", "utf8"]

DEAD_LETTER_DETAIL_BODY_ENCODING_VALUES: set[DeadLetterDetailBodyEncoding] = {
    "base64",
    "utf8",
}


def check_dead_letter_detail_body_encoding(value: str) -> DeadLetterDetailBodyEncoding:
    if value in DEAD_LETTER_DETAIL_BODY_ENCODING_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {DEAD_LETTER_DETAIL_BODY_ENCODING_VALUES!r}")
