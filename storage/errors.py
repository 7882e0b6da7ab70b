"""rocktimer's one error tree: every error it raises on purpose, from every layer.

Here, at the lowest layer, so that storage, workers and app all raise from one tree;
app/errors.py adds the errors only a request can make (a bad field, a missing key, a body
too large) and maps each class to an HTTP reply once, by the class hierarchy (the most
specific class in an error's MRO that has an entry wins). Messages of the 5xx classes may
carry internal text (RocksDB's): they are logged, never sent to a client.
"""

from __future__ import annotations


class RocktimerError(Exception):
    """Base of every error rocktimer raises on purpose."""


# --- storage ----------------------------------------------------------------------------


class StorageError(RocktimerError):
    """The store could not do what was asked (disk full, I/O error, closed)."""


class StoreClosedError(StorageError):
    """The store was closed (shutting down)."""


class CorruptRecordError(StorageError):
    """A stored value could not be decoded."""


class DiskFullError(StorageError):
    """Too little free disk: writes that add data are refused until space is freed."""


# --- the writer -------------------------------------------------------------------------


class Overloaded(RocktimerError):
    """The writer queue is full, or deliveries lag (workers/lag.py): back off and retry."""

    def __init__(
        self, retry_after_s: int = 1, detail: str = "the write queue is full; retry later"
    ) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class WriterStopped(RocktimerError):
    """The writer is not running (starting up or shutting down)."""


class PartitionUnavailable(WriterStopped):
    """A partition is not served here right now: the worker process that owns it is being
    restarted (app/cluster/), or in cluster mode this node no longer owns it (its changelog
    append was refused, or its lease ran out: app/cluster/replica/). 503 + Retry-After;
    the engine's own threads treat it as a stopped writer."""


# --- what a request asked for cannot be done ---------------------------------------------


class MessageNotFound(RocktimerError):
    """No message with this (topic, msg_id)."""


class ScheduleNotFound(MessageNotFound):
    """No recurring schedule with this (topic, schedule_id) (a 404 like a message's)."""


class MessageConflict(RocktimerError):
    """The message's state forbids the request (cancel a delivered one, re-send a cancelled one)."""


class ReceiptRejected(MessageConflict):
    """The receipt no longer controls the message (acked, expired, or received again)."""


class PushedGroup(MessageConflict):
    """The group's messages are POSTed to its webhook: nobody may receive them (409)."""
