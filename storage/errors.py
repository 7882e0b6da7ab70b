"""The root of rocktimer's error tree and the storage branch of it.

app/errors.py maps each class to an HTTP status once; nothing else builds error replies.
"""

from __future__ import annotations


class RocktimerError(Exception):
    """Base of every error rocktimer raises on purpose."""


class StorageError(RocktimerError):
    """The store could not do what was asked (disk full, I/O error, closed)."""


class StoreClosedError(StorageError):
    """The store was closed (shutting down)."""


class CorruptRecordError(StorageError):
    """A stored value could not be decoded."""


class DiskFullError(StorageError):
    """Too little free disk: writes that add data are refused until space is freed."""
