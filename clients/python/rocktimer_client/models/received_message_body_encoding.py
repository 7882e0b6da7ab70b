from typing import Literal

ReceivedMessageBodyEncoding = Literal["base64", "utf8"]

RECEIVED_MESSAGE_BODY_ENCODING_VALUES: set[ReceivedMessageBodyEncoding] = {
    "base64",
    "utf8",
}


def check_received_message_body_encoding(value: str) -> ReceivedMessageBodyEncoding:
    if value in RECEIVED_MESSAGE_BODY_ENCODING_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {RECEIVED_MESSAGE_BODY_ENCODING_VALUES!r}")
