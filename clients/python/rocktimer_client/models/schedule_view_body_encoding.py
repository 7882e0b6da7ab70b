from typing import Literal

ScheduleViewBodyEncoding = Literal["base64", "utf8"]

SCHEDULE_VIEW_BODY_ENCODING_VALUES: set[ScheduleViewBodyEncoding] = {
    "base64",
    "utf8",
}


def check_schedule_view_body_encoding(value: str) -> ScheduleViewBodyEncoding:
    if value in SCHEDULE_VIEW_BODY_ENCODING_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {SCHEDULE_VIEW_BODY_ENCODING_VALUES!r}")
