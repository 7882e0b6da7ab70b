"""The numbers of the HTTP contract (api.md) that clients need too, declared once: the
request models, the routes, the settings, the CLI and the pipeline read them here.

Plain constants with no imports, so the CLI reads them without loading the server."""

from __future__ import annotations

from typing import Final

HOST: Final = "127.0.0.1"
PORT: Final = 8080
URL: Final = f"http://{HOST}:{PORT}"  # where the service listens unless told otherwise

MAX_BATCH: Final = 1000  # items of one batch request (send, ack, nack, extend, ...)
PAGE_DEFAULT: Final = 100  # items per page when the client gives no limit
PAGE_MAX: Final = 1000  # items per page at most

RECEIVE_WAIT_MS_MAX: Final = 30_000  # the longest long poll a receive may ask for
# How long a received message stays invisible unless the receive says (1 s .. 12 h).
INVISIBLE_MS: Final = 30_000
INVISIBLE_MS_MIN: Final = 1_000
INVISIBLE_MS_MAX: Final = 43_200_000

STREAM_MAX_IN_FLIGHT: Final = 100  # unacked messages a stream holds unless told
STREAM_MAX_IN_FLIGHT_LIMIT: Final = 1_000  # ... and at most
# A stream with nothing to send says ": keep-alive" this often (proxies drop idle ones).
STREAM_KEEPALIVE_MS: Final = 15_000
