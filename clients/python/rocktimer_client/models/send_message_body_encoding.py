from typing import Literal

SendMessageBodyEncoding = Literal["base64", "utf8"]

SEND_MESSAGE_BODY_ENCODING_VALUES: set[SendMessageBodyEncoding] = {
    "base64",
    "utf8",
}


def check_send_message_body_encoding(value: str) -> SendMessageBodyEncoding:
    if value in SEND_MESSAGE_BODY_ENCODING_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {SEND_MESSAGE_BODY_ENCODING_VALUES!r}")
