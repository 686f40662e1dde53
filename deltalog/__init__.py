"""Lakeshare's Delta log reader: snapshots, history and change data of Delta tables."""

from deltalog.actions import CommitActions, Metadata, Protocol
from deltalog.errors import (
    CorruptLogError,
    DeletionVectorError,
    DeltaError,
    MissingLogFileError,
    StorageError,
    TableNotFoundError,
    TimestampOutOfRangeError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from deltalog.loading import SnapshotHead, SnapshotLoading
from deltalog.snapshot import Snapshot
from deltalog.snapshot_store import SnapshotStore
from deltalog.table import DeltaTable

__all__ = [
    "CommitActions",
    "CorruptLogError",
    "DeletionVectorError",
    "DeltaError",
    "DeltaTable",
    "Metadata",
    "MissingLogFileError",
    "Protocol",
    "Snapshot",
    "SnapshotHead",
    "SnapshotLoading",
    "SnapshotStore",
    "StorageError",
    "TableNotFoundError",
    "TimestampOutOfRangeError",
    "UnsupportedFeatureError",
    "VersionNotFoundError",
]
