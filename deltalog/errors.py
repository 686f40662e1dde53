"""Errors raised by the Delta log reader.

Callers (the sharing layer) map these to protocol errors; each carries a message that is
safe to show to a recipient (no storage credentials, no absolute local paths beyond the
table-relative log file names).
"""

from __future__ import annotations


class DeltaError(Exception):
    """Base class of every error this package raises on purpose."""


class TableNotFoundError(DeltaError):
    """The location holds no Delta table (no `_delta_log`, or it is empty)."""


class CorruptLogError(DeltaError):
    """The log is present but cannot be replayed: gaps, bad JSON, missing protocol/metaData."""


class MissingLogFileError(CorruptLogError):
    """A commit or checkpoint file the replay needs is not there."""


class VersionNotFoundError(DeltaError):
    """A requested version does not exist (beyond the latest, or before the earliest kept)."""

    def __init__(self, message: str, *, version: int, earliest: int | None, latest: int | None):
        super().__init__(message)
        self.version = version
        self.earliest = earliest
        self.latest = latest


class TimestampOutOfRangeError(DeltaError):
    """A timestamp lies before the first or after the last commit of the table."""

    def __init__(self, message: str, *, before_first: bool):
        super().__init__(message)
        self.before_first = before_first


class UnsupportedFeatureError(DeltaError):
    """The table needs reader features (or a reader version) this reader does not implement."""

    def __init__(self, message: str, *, features: list[str]):
        super().__init__(message)
        self.features = features


class DeletionVectorError(DeltaError):
    """A deletion vector cannot be read: bad descriptor, missing file, checksum mismatch."""


class StorageError(DeltaError):
    """A storage backend failed in a way that is not 'file not found'."""
