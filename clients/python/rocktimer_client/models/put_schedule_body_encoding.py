from typing import Literal

PutScheduleBodyEncoding = Literal["base64", "utf8"]

PUT_SCHEDULE_BODY_ENCODING_VALUES: set[PutScheduleBodyEncoding] = {
    "base64",
    "utf8",
}


def check_put_schedule_body_encoding(value: str) -> PutScheduleBodyEncoding:
    if value in PUT_SCHEDULE_BODY_ENCODING_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {PUT_SCHEDULE_BODY_ENCODING_VALUES!r}")
